"""Redis pools against a Redis connected and silent: a redis-server stopped (SIGSTOP), whose kernel still
accepts connections and acknowledges every byte, as a hung Redis or a proxy holding a blackholed link does."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import TimeoutError as RedisTimeoutError
from support.servers import RedisServer, start_redis

from oss_responses import redis_pool
from oss_responses.redis_pool import PatientPool

SOCKET_TIMEOUT = 1.0


@pytest.fixture
def server() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    os.kill(server.process.pid, signal.SIGCONT)
    server.stop()


async def _timed_out_after(server: RedisServer, *, idle: bool) -> float:
    """Seconds until an LLEN on a patient pool fails with Redis stopped, its connection idle (checked) or new."""
    client = Redis(connection_pool=PatientPool.from_url(server.url, socket_timeout=SOCKET_TIMEOUT))
    try:
        if idle:
            await client.ping()
        os.kill(server.process.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError):
            await client.llen("waiting")
        return time.monotonic() - started
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        await client.aclose()


def test_new_connection_to_stopped_redis_fails_within_one_socket_timeout(server: RedisServer) -> None:
    # The handshake's unanswered reply was taken for a slow connect and tried again: three socket timeouts.
    assert asyncio.run(_timed_out_after(server, idle=False)) < 2 * SOCKET_TIMEOUT


def test_idle_connection_to_stopped_redis_fails_within_one_socket_timeout(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The idle check's unanswered PING was taken for a stale connection, connected again (three more timeouts).
    monkeypatch.setattr(redis_pool, "IDLE_CHECK_SECONDS", 0.0)
    assert asyncio.run(_timed_out_after(server, idle=True)) < 2 * SOCKET_TIMEOUT
