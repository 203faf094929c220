"""What the API builds at start-up for its routes to share (``api/app.py``, ``api/services.py``)."""

from __future__ import annotations

import asyncio
from importlib import metadata

import pytest
import redis as redis_lib
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from support import MODEL
from support.db_connections import counted_connects, hold_async_sessions
from support.servers import free_port, start_redis

from oss_responses import redis_pool
from oss_responses.api.app import _open_services
from oss_responses.api.services import api_redis
from oss_responses.config import Settings
from oss_responses.redis_pool import CONNECT_ATTEMPTS, driver_info


def test_open_services_keeps_database_pool_size_connections_open(database_url: str, redis_url: str) -> None:
    settings = Settings(database_url=database_url, redis_url=redis_url, models=[MODEL], database_pool_size=12)

    async def reopened() -> list[object]:
        async with _open_services(settings) as services:
            await hold_async_sessions(services.db, 12)
            with counted_connects(services.db.engine.sync_engine) as opened:
                await hold_async_sessions(services.db, 12)
            return opened

    assert asyncio.run(reopened()) == []


async def _ping(url: str) -> bool:
    client = api_redis(url)
    try:
        return bool(await client.ping())
    finally:
        await client.aclose()


@pytest.mark.parametrize("idle_check_seconds", [0.0, 3600.0], ids=["idle", "fresh"])
def test_api_redis_idle_connection_is_checked_after_redis_restart(
    monkeypatch: pytest.MonkeyPatch, idle_check_seconds: float
) -> None:
    """Every pooled connection is stale once Redis restarted: an idle one is PINGed and connected again
    before its next command; one used within the idle check's time is not PINGed, and its command fails."""
    monkeypatch.setattr(redis_pool, "IDLE_CHECK_SECONDS", idle_check_seconds)
    server = start_redis()

    async def after_restart() -> int:
        client = api_redis(server.url)
        try:
            await client.ping()
            server.kill()
            server.restart()
            return int(await client.llen("waiting"))
        finally:
            await client.aclose()

    try:
        if idle_check_seconds:
            with pytest.raises(RedisConnectionError):
                asyncio.run(after_restart())
        else:
            assert asyncio.run(after_restart()) == 0
    finally:
        server.stop()


def test_api_redis_connects_again_after_connect_timeouts(redis_url: str, connect_timeouts) -> None:  # type: ignore[no-untyped-def]
    attempts = connect_timeouts(CONNECT_ATTEMPTS - 1)
    assert asyncio.run(_ping(redis_url))
    assert attempts == list(range(1, CONNECT_ATTEMPTS + 1))


def test_api_redis_gives_up_after_its_connect_attempts_time_out(redis_url: str, connect_timeouts) -> None:  # type: ignore[no-untyped-def]
    attempts = connect_timeouts(CONNECT_ATTEMPTS)
    with pytest.raises(RedisTimeoutError):
        asyncio.run(_ping(redis_url))
    assert len(attempts) == CONNECT_ATTEMPTS


def test_api_redis_refused_connect_fails_at_once(connect_timeouts) -> None:  # type: ignore[no-untyped-def]
    """Redis down (nothing listens): no attempt is repeated, so the request's 503 comes at once."""
    attempts = connect_timeouts(0)
    with pytest.raises(RedisConnectionError):
        asyncio.run(_ping(f"redis://127.0.0.1:{free_port()}/0"))
    assert attempts == [1]


def test_api_redis_new_connections_read_no_package_metadata_and_still_name_their_client(
    redis_url: str, redis: redis_lib.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py read its version from disk for each new connection (~0.28 ms of the loop each)."""
    driver_info()  # the process's, built once
    reads: list[None] = []
    monkeypatch.setattr("redis.utils.get_lib_version", lambda: reads.append(None) or "0")

    async def five_at_once() -> tuple[str | None, str | None]:
        client = api_redis(redis_url)
        try:
            await asyncio.gather(*(client.blpop(["nothing"], timeout=0.1) for _ in range(5)))
            connection = await client.connection_pool.get_connection()
            await client.connection_pool.release(connection)
            info = connection.driver_info
            return (None, None) if info is None else (info.formatted_name, info.lib_version)
        finally:
            await client.aclose()

    named = asyncio.run(five_at_once())
    assert reads == []
    assert len([c for c in redis.client_list() if c["cmd"] == "blpop"]) == 5
    assert named == ("redis-py", metadata.version("redis"))  # what CLIENT SETINFO sends (Redis 7.2+)
