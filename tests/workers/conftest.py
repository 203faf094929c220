"""Worker fixtures: settings on the session's redis-server and a per-test database, a database
handle, an in-process worker (scripted engine, no reaper), and the MCP servers of the tool tests."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib
from support.mcp import CALCULATOR, MISBEHAVING, mcp_server
from support.processes import WorkerProcess, ready_workers
from support.servers import RedisServer, start_redis
from support.silent_link import SilentLink
from support.tool_turns import ToolEnv, tool_settings
from support.workers import worker_settings

from oss_responses.config import Settings
from oss_responses.storage import Database
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.testing import local_worker


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
    with mcp_server(*CALCULATOR) as url:
        yield url


@pytest.fixture(scope="session")
def misbehaving_url() -> Iterator[str]:
    """A slow tool, a crashing tool, and a tool that echoes the Authorization header."""
    with mcp_server(*MISBEHAVING) as url:
        yield url


@pytest.fixture
def tools(
    database_url: str, redis_url: str, redis: redis_lib.Redis, calculator_url: str, misbehaving_url: str
) -> Iterator[ToolEnv]:
    settings = tool_settings(database_url, redis_url, calculator_url, misbehaving_url)
    env = ToolEnv(settings, Database(settings.database_url), redis)
    yield env
    env.db.dispose()


@pytest.fixture
def start_worker(tmp_path: Path, redis: redis_lib.Redis) -> Iterator:  # type: ignore[type-arg]
    """Starts Celery worker processes (``python -m oss_responses.workers``, forked unless ``fork=False``:
    ``support.forked``), each ready when returned."""
    started: list[WorkerProcess] = []

    def start(settings: Settings, name: str, *, fork: bool = True) -> WorkerProcess:
        known = ready_workers(redis)
        worker = WorkerProcess(settings, name, tmp_path, fork=fork)
        started.append(worker)
        worker.wait_ready(redis, known)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def silent_link(redis_url: str) -> Iterator[SilentLink]:
    """A link to the test's Redis that can fall silent or reset, on an event loop of its own (the client under
    test runs on another: kombu's is synchronous)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    link = asyncio.run_coroutine_threadsafe(SilentLink(port).start(), loop).result(5)
    try:
        yield link
    finally:
        asyncio.run_coroutine_threadsafe(link.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to kill or stop (SIGSTOP) under a worker."""
    server = start_redis()
    yield server
    server.process.send_signal(signal.SIGCONT)
    server.stop()
