"""Fixtures shared by every test folder: a real redis-server and a real PostgreSQL cluster.

- ``redis_url`` (session): a redis-server of our own on a free port; ``redis``: a client on it, flushed
  before each test.
- ``postgres_url`` (session): a database in a PostgreSQL cluster started in a temp dir (not migrated).
- ``database_url``: a fresh, migrated database per test, once on SQLite (a file in ``tmp_path``) and
  once on PostgreSQL (ids ``sqlite`` / ``postgresql``; the latter is marked ``postgres``). Both are
  cloned from a template migrated once per session, so a test costs a file copy or a CREATE DATABASE.
"""

from __future__ import annotations

import itertools
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib

sys.path.insert(0, str(Path(__file__).parent))  # ``support`` importable in every import mode

from support.servers import PostgresCluster, start_postgres, start_redis  # noqa: E402

from oss_responses.storage import migrate  # noqa: E402

_database_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    server = start_redis()
    yield server.url
    server.stop()


@pytest.fixture(name="redis")
def redis_client(redis_url: str) -> Iterator[redis_lib.Redis]:
    client = redis_lib.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    cluster = start_postgres()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_cluster: PostgresCluster) -> str:
    return postgres_cluster.create_database("oss_responses")


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    migrate(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_template(postgres_cluster: PostgresCluster) -> str:
    name = "oss_template"
    migrate(postgres_cluster.create_database(name))
    return name


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database of its own (sync SQLAlchemy URL)."""
    if request.param == "sqlite":
        path = tmp_path / "oss-responses.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    template: str = request.getfixturevalue("postgres_template")
    name = f"test_{next(_database_numbers)}"
    yield cluster.create_database(name, template=template)
    cluster.drop_database(name)
