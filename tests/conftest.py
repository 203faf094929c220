"""Fixtures shared by every test folder: a real redis-server and a real PostgreSQL cluster.

- ``redis_url`` (session): a redis-server of our own on a free port; ``redis``: a client on it, flushed
  before each test.
- ``postgres_url`` (session): a database in a PostgreSQL cluster started in a temp dir (not migrated).
- ``database_url``: a fresh, migrated database per test, once on SQLite (a file in ``tmp_path``) and
  once on PostgreSQL (ids ``sqlite`` / ``postgresql``; the latter is marked ``postgres``). Both are
  cloned from a template migrated once per session, so a test costs a file copy or a CREATE DATABASE.
- ``stack_database_url``: the same, one per test module, for a module's API and worker processes.

The helpers in ``tests/support`` import as ``support``: pytest's ``pythonpath`` (pyproject.toml) puts
``tests/`` on ``sys.path``.
"""

from __future__ import annotations

import itertools
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis as redis_lib
from redis.asyncio.connection import Connection
from support.servers import PostgresCluster, start_postgres, start_redis

from oss_responses.heap import tune_garbage_collection
from oss_responses.storage import migrate

_database_numbers = itertools.count(1)
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
# The engine tests share a session's tiny model and vLLM engine: under pytest-xdist they run in one
# process, first, since together they are the suite's longest stretch (see pytest_xdist_make_scheduler).
ENGINE_TESTS = "tests/engine/"


# Libraries that only some test modules use and that cost seconds of CPU to import (vLLM ~10 s and
# ~370 MB, LiteLLM ~4 s): every test process collects every module, so those modules import them in
# their tests or fixtures. What collection left imported is checked by tests/test_collection.py.
HEAVY_LIBRARIES = ("vllm", "torch", "transformers", "litellm")
IMPORTED_AT_COLLECTION = pytest.StashKey[frozenset[str]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[IMPORTED_AT_COLLECTION] = frozenset(name for name in HEAVY_LIBRARIES if name in sys.modules)
    # A test process holds ~560k objects once it has collected the suite, and CPython's full collection
    # walked them all, ~0.4 s a pass and ~90 passes per process, stopping the API that the process serves in
    # a thread meanwhile (the probable cause of a 0.6 s wait in test_token_count.py's stall check). Frozen
    # as the service's processes freeze their start-up heap, a pass walks only what the tests allocated since.
    tune_garbage_collection("test process")


@pytest.fixture
def imported_at_collection(pytestconfig: pytest.Config) -> frozenset[str]:
    """Which of ``HEAVY_LIBRARIES`` this test process had imported once it collected the tests."""
    return pytestconfig.stash[IMPORTED_AT_COLLECTION]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(ENGINE_TESTS))  # stable: the rest keep their order


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadscope`` (``make test``): a test module whole in one process, and every engine module
    in one; any other ``--dist`` is xdist's own."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class EngineTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return ENGINE_TESTS if nodeid.startswith(ENGINE_TESTS) else super()._split_scope(nodeid)

    return EngineTogether(config, log)


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


@contextmanager
def fresh_database(request: pytest.FixtureRequest, backend: str, folder: Path) -> Iterator[str]:
    """A migrated, empty database of its own (sync SQLAlchemy URL), dropped afterwards: on SQLite a copy
    of the template in ``folder``, on PostgreSQL a database created from the template."""
    if backend == "sqlite":
        path = folder / "oss-responses.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    template: str = request.getfixturevalue("postgres_template")
    name = f"test_{next(_database_numbers)}"
    yield cluster.create_database(name, template=template)
    cluster.drop_database(name)


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database of this test's own, on SQLite and on PostgreSQL."""
    with fresh_database(request, request.param, tmp_path) as url:
        yield url


@pytest.fixture(scope="module", params=BACKENDS)
def stack_database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated database shared by a module's API and worker processes, on SQLite and on PostgreSQL."""
    with fresh_database(request, request.param, tmp_path_factory.mktemp("stack")) as url:
        yield url


@pytest.fixture
def connect_timeouts(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], list[int]]:
    """Makes the first ``n`` socket connects of redis.asyncio time out, as an event loop that runs
    behind makes them do; returns the list of attempts (their numbers) as they happen."""

    def arm(n: int) -> list[int]:
        attempts: list[int] = []
        real_connect = Connection._connect

        async def connect(self: Connection) -> None:
            attempts.append(len(attempts) + 1)
            if len(attempts) <= n:
                raise TimeoutError
            await real_connect(self)

        monkeypatch.setattr(Connection, "_connect", connect)
        return attempts

    return arm


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no tables at all (migrations start from here)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sub' / 'empty.db'}"
        return
    cluster = request.getfixturevalue("postgres_cluster")
    name = f"empty_{tmp_path.name}".lower().replace("-", "_")[:60]
    yield cluster.create_database(name)
    cluster.drop_database(name)
