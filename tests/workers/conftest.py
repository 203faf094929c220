"""Worker fixtures: settings on the session's redis-server and a per-test database, a database
handle, and an in-process worker (scripted engine, no reaper)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib

sys.path.insert(0, str(Path(__file__).parent))  # ``worker_support`` importable in every import mode

from worker_support import worker_settings  # noqa: E402

from oss_responses.config import Settings  # noqa: E402
from oss_responses.storage import Database  # noqa: E402
from oss_responses.workers.context import WorkerContext  # noqa: E402
from oss_responses.workers.testing import local_worker  # noqa: E402


@pytest.fixture
def settings(database_url: str, redis_url: str, redis: redis_lib.Redis) -> Settings:
    return worker_settings(database_url, redis_url)


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    database = Database(settings.database_url)
    yield database
    database.dispose()


@pytest.fixture
def worker(settings: Settings) -> Iterator[WorkerContext]:
    with local_worker(settings) as ctx:
        yield ctx


