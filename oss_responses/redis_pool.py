"""Redis connection pools: for an asyncio process that serves bursts, a pool whose timed-out connects
are tried again and whose idle connections are checked before use; for every pool, new connections
that cost no disk read."""

from __future__ import annotations

import functools
import logging
import socket
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


# The kernel's guards against a Redis gone silent (a blackholed link, a lost NAT entry or load-balancer
# flow: no RST ever comes), as storage/db.py's for PostgreSQL: a dead connection is known within ~25 s
# idle (keepalives) or 30 s of unacknowledged data (TCP_USER_TIMEOUT, Linux), and its command fails as
# on a lost connection. Without them a command waited for TCP's ~15 minutes of retries, or 2 hours idle.
_KEEPALIVE = {"TCP_KEEPIDLE": 10, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3, "TCP_USER_TIMEOUT": 30_000}


def silent_peer_guards() -> dict[str, Any]:
    """Connection options for redis-py (and kombu's Redis transport, which passes them on)."""
    options = {getattr(socket, name): value for name, value in _KEEPALIVE.items() if hasattr(socket, name)}
    return {"socket_keepalive": True, "socket_keepalive_options": options}


def reset_is_lost_connection(pool: BlockingConnectionPool) -> BlockingConnectionPool:
    """``pool``, its connections of a class that reports a write to a connection the network reset as a
    lost connection (``ConnectionError``: reconnected, and retried where the client retries).

    On uvloop a write to a transport closed under it (an RST from a restarted proxy or NAT, read by the
    loop while the connection sat in the pool) raises ``RuntimeError: ... the handler is closed``, which
    redis-py neither reconnects nor retries on: a worker's lease release raised out of its task, and an
    outage before a response started would have failed the response (the network probe's reset)."""
    base = pool.connection_class
    if base not in _RESET_IS_LOST:
        _RESET_IS_LOST[base] = _reset_is_lost(base)
    pool.connection_class = _RESET_IS_LOST[base]
    return pool


_RESET_IS_LOST: dict[type[AbstractConnection], type[AbstractConnection]] = {}  # one subclass per base


def _reset_is_lost(base: type[AbstractConnection]) -> type[AbstractConnection]:
    class ResetIsLost(base):  # type: ignore[valid-type,misc]  # of whichever class the URL chose (TLS, unix)
        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            transport = self._writer.transport if self._writer is not None else None
            try:
                await super().send_packed_command(command, check_health)
            except RuntimeError as exc:
                if transport is None or not transport.is_closing():
                    raise
                raise RedisConnectionError(f"Error while writing to Redis: the connection was reset ({exc})") from exc

    ResetIsLost.__name__ = ResetIsLost.__qualname__ = f"ResetIsLost{base.__name__}"
    return ResetIsLost


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
        for name, value in silent_peer_guards().items():
            connection_kwargs.setdefault(name, value)
        super().__init__(*args, **connection_kwargs)
        reset_is_lost_connection(self)
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
            except RedisTimeoutError as exc:
                if attempt == CONNECT_ATTEMPTS or not _connect_timed_out(exc):
                    raise
                log.info("connecting to Redis timed out (attempt %d of %d); trying again",
                         attempt, CONNECT_ATTEMPTS)
                await anyio.sleep(CONNECT_PAUSE_SECONDS * attempt)


def _connect_timed_out(exc: RedisTimeoutError) -> bool:
    """The socket's connect timed out (redis-py's "Timeout connecting to server"): on a busy event loop, not
    only a Redis away. Its handshake's reply not read in time ("Timeout reading from ...") is a Redis connected
    and silent (stopped, hung, a blackholed link): each attempt waited the whole socket timeout, and a create met
    three (15 s), or four after an idle connection's PING (20 s: a POST during a 20 s SIGSTOP waited it out)."""
    return str(exc).startswith("Timeout connecting")


async def _drop_if_stale(connection: AbstractConnection) -> None:
    """PING an idle connection; disconnect it if that fails (the pool then connects it again). A PING left
    unanswered for the socket timeout is a silent Redis, no stale connection: its error is the command's."""
    try:
        await connection.send_command("PING", check_health=False)
        await connection.read_response()
    except RedisTimeoutError:
        await connection.disconnect()
        raise
    except (RedisConnectionError, OSError):
        log.info("a pooled Redis connection went stale (Redis restarted?): connecting it again")
        await connection.disconnect()
