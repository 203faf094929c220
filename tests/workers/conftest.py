"""Worker fixtures: settings on the session's redis-server and a per-test database, a database
handle, an in-process worker (scripted engine, no reaper), and the MCP servers of the tool tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib

sys.path.insert(0, str(Path(__file__).parent))  # ``worker_support`` importable in every import mode

from tool_env import ToolEnv, tool_settings  # noqa: E402
from tool_support import MISBEHAVING, mcp_server  # noqa: E402
from worker_support import WorkerProcess, worker_settings  # noqa: E402

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



@pytest.fixture(scope="session")
def calculator_url() -> Iterator[str]:
    with mcp_server("-m", "oss_responses.tools.servers.calculator") as url:
        yield url


@pytest.fixture(scope="session")
def misbehaving_url() -> Iterator[str]:
    """A slow tool, a crashing tool, and a tool that echoes the Authorization header."""
    with mcp_server(str(MISBEHAVING)) as url:
        yield url


@pytest.fixture
def tools(database_url: str, redis_url: str, redis: redis_lib.Redis, calculator_url: str, misbehaving_url: str) -> Iterator[ToolEnv]:
    settings = tool_settings(database_url, redis_url, calculator_url, misbehaving_url)
    env = ToolEnv(settings, Database(settings.database_url), redis)
    yield env
    env.db.dispose()


@pytest.fixture
def start_worker(tmp_path: Path, redis: redis_lib.Redis) -> Iterator:  # type: ignore[type-arg]
    """Starts Celery worker processes (``python -m oss_responses.workers``), each ready when returned."""
    started: list[WorkerProcess] = []

    def start(settings: Settings, name: str) -> WorkerProcess:
        known = set(redis.scan_iter("oss:worker:*:ready"))
        worker = WorkerProcess(settings, name, tmp_path)
        started.append(worker)
        worker.wait_ready(redis, known)
        return worker

    yield start
    for worker in started:
        worker.stop()
