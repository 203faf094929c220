"""Redis connection pools: for an asyncio process that serves bursts, a pool whose timed-out connects
are tried again and whose idle connections are checked before use; for every pool, new connections
that cost no disk read."""

from __future__ import annotations

import functools
import logging
import time
from typing import Any
from weakref import WeakKeyDictionary

import anyio
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.connection import AbstractConnection
from redis.driver_info import DriverInfo
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

CONNECT_ATTEMPTS = 3
CONNECT_PAUSE_SECONDS = 0.1
# A connection back in the pool this long is PINGed before its next use, and dropped (then connected
# again) if the ping fails. After a Redis restart every idle pooled connection is stale, and each one's
# next command failed (a create's queue-depth read, its opening events: a 503) before redis-py dropped it.
IDLE_CHECK_SECONDS = 1.0


@functools.cache
def driver_info() -> DriverInfo:
    """What this process's connections tell Redis about their client (``CLIENT SETINFO``), built once.

    redis-py builds it for each new connection and reads its own version from the package metadata on
    disk each time: ~0.28 ms of the event loop per connection (against 6 us with this one shared), and a
    burst of requests opens up to a pool's hundred connections at once.
    """
    return DriverInfo()


class PatientPool(BlockingConnectionPool):
    """A pool whose new connections try their connect again when it times out.

    The connect timeout is wall time on this process's event loop, and in a burst the loop itself runs
    behind: 250 concurrent POSTs on two busy cores opened up to 100 connections at once, and some of
    them timed out ("Timeout connecting to server") with Redis idle, each a 503 saying Redis was
    unreachable. A refused connect (Redis down) is a ``ConnectionError`` and fails at once, and nothing
    sent on an open connection is repeated (a write that might have landed must not land twice).
    The API's pools (``api/services.py``) and its event hub's are such pools; a worker's clients retry
    connects and safe commands alike (``workers/context.py``).
    """

    def __init__(self, *args: Any, **connection_kwargs: Any) -> None:
        connection_kwargs.setdefault("driver_info", driver_info())
        super().__init__(*args, **connection_kwargs)
        self._released: WeakKeyDictionary[AbstractConnection, float] = WeakKeyDictionary()

    async def release(self, connection: AbstractConnection) -> None:
        self._released[connection] = time.monotonic()
        await super().release(connection)

    async def ensure_connection(self, connection: AbstractConnection) -> None:
        released = self._released.pop(connection, None)
        if connection.is_connected and released is not None and time.monotonic() - released > IDLE_CHECK_SECONDS:
            await _drop_if_stale(connection)
        for attempt in range(1, CONNECT_ATTEMPTS + 1):
            try:
                await super().ensure_connection(connection)
                return
            except RedisTimeoutError:
                if attempt == CONNECT_ATTEMPTS:
                    raise
                log.info("connecting to Redis timed out (attempt %d of %d); trying again",
                         attempt, CONNECT_ATTEMPTS)
                await anyio.sleep(CONNECT_PAUSE_SECONDS * attempt)


async def _drop_if_stale(connection: AbstractConnection) -> None:
    """PING an idle connection; disconnect it if that fails (the pool then connects it again)."""
    try:
        await connection.send_command("PING", check_health=False)
        await connection.read_response()
    except (RedisConnectionError, RedisTimeoutError, OSError):
        log.info("a pooled Redis connection went stale (Redis restarted?): connecting it again")
        await connection.disconnect()
