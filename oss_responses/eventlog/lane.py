"""One blocking multiplexed read of the hub: ``XREAD COUNT n BLOCK ms STREAMS k1 ... id1 ...`` on a
connection of its own, and the wake stream that ends it early.

The hub reads on two lanes (``hub.py``): the streams that had an event lately, read again after every
flush, and the quiet ones, whose read stays blocked in Redis until one of them gets an event. A read
names every stream of its lane and Redis handles each named stream on every read (~0.5 us each on the
development machine, blocking or not): with a thousand quiet streams in the one read there was, Redis
spent about three times the CPU per event relayed on 16 busy ones (``bench/relay.py`` (e)).

Waking a blocked read: every read also names the lane's own wake stream (``redis_keys.hub_wake``);
XADD to it (from the hub's side connection) ends the read at once. Unlike CLIENT UNBLOCK, this has
no race: a wake sent before the read reaches Redis still ends it at once.

An error reply (to the read, or to the connection's PING) is raised as redis-py raises it
(``BusyLoadingError`` for LOADING, ``ResponseError`` for WRONGTYPE, ...), so that the hub tells an
outage from a refused read as it does for its redis-py calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Any, Protocol, cast

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from oss_responses.eventlog.bulk import bulk_string
from oss_responses.eventlog.pipe import RedisPipe

log = logging.getLogger(__name__)

WAKE_TTL_SECONDS = 86_400
# Redis away or not answering (as the hub's OUTAGE: a lane cannot import the hub).
_OUTAGE: tuple[type[Exception], ...] = (OSError, RedisConnectionError, RedisTimeoutError)
# How long a stopping hub's lane tries to delete its wake stream. With Redis silent (SIGSTOP, a blackholed link)
# each DEL took 15 s (its connection's three connect attempts), one lane after the other: an API stopped then took
# 30 s to exit, its orchestrator's whole grace period. The stream expires anyway.
STOP_REDIS_SECONDS = 3.0


class Followed(Protocol):
    """A followed stream as a read names it: its name and cursor, packed (RESP) once per change."""

    packed_name: bytes
    packed_cursor: bytes


class ReadLane:
    """A lane's connection, wake stream and state: ``read`` blocks until one of the named streams (or
    the wake stream) has entries; ``wake`` ends a read on its way, or starts one that waits for work."""

    def __init__(self, wake_key: str, side: Callable[[], Redis], *, count: int, block_ms: int) -> None:
        self.wake_key = wake_key
        self._wake_name = wake_key.encode()
        self._packed_wake_name = bulk_string(self._wake_name)
        self._wake_cursor = b"0-0"
        self._side = side
        self._block_ms = block_ms
        options = [b"XREAD", b"COUNT", b"%d" % count, b"BLOCK", b"%d" % block_ms, b"STREAMS"]
        self._arity = len(options)
        self._packed_options = b"".join(bulk_string(arg) for arg in options)
        self._reading = False  # a read is on its way: waking it takes a wake-stream XADD
        self._wake_sent = False
        self.work = asyncio.Event()  # set to start a read when the lane had nothing to read
        self._pipe: RedisPipe | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        if not self._reading:
            self.work.set()
        elif not self._wake_sent:
            self._wake_sent = True
            task = asyncio.create_task(self._send_wake())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send_wake(self) -> None:
        async with self._side().pipeline(transaction=False) as pipe:
            pipe.xadd(self.wake_key, {"w": "1"}, maxlen=1, approximate=False)
            pipe.expire(self.wake_key, WAKE_TTL_SECONDS)
            await pipe.execute()

    async def read(self, streams: Collection[Followed]) -> list[tuple[bytes, list[Any]]]:
        """The streams' entries after their cursors (``[[key, raw entries], ...]``), the wake stream's
        left out; empty when the block timed out or only the wake stream had one.

        Joined from bytes packed beforehand and written on the lane's own connection (``RedisPipe``):
        redis-py's per-argument encoding cost ~2 us per stream per read (205 vs 94 us for 100
        streams), its reply path ~10 us more per read than the pipe's.
        """
        command = b"".join([
            b"*%d\r\n" % (self._arity + 2 * (len(streams) + 1)),
            self._packed_options,
            *[stream.packed_name for stream in streams], self._packed_wake_name,
            *[stream.packed_cursor for stream in streams], bulk_string(self._wake_cursor),
        ])
        self._reading, self._wake_sent = True, False
        try:
            reply = await self._send(command)
        finally:
            self._reading = False
        found = []
        for key, entries in reply:
            if key == self._wake_name:
                self._wake_cursor = entries[-1][0]
            else:
                found.append((key, entries))
        return found

    async def _send(self, command: bytes) -> list[Any]:
        pipe = await self.connected()
        try:
            # A silent network outlives BLOCK: past it by 10 s, the connection is given up.
            reply = await asyncio.wait_for(pipe.send(command, 1)[0], self._block_ms / 1000 + 10)
        except BaseException:
            # A read cut short leaves its reply (or a broken socket) behind: the next read reconnects.
            self.close()
            raise
        if isinstance(reply, Exception):  # an error reply (hiredis.ReplyError): the only exception a reply is
            raise redis_error(reply)
        # RESP2: a list of [key, entries]; nil when the block timed out.
        return cast(list[Any], reply or [])

    async def connected(self) -> RedisPipe:
        if self._pipe is None or not self._pipe.usable:
            self.close()
            try:
                self._pipe = await RedisPipe.open(self._side(), [[b"PING"]])
            except hiredis.ReplyError as error:  # LOADING: a Redis that restarted answers once its data is in
                raise redis_error(error) from None
        return self._pipe

    def close(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None

    async def stop(self) -> None:
        """Its wakes settled, its connection closed and its wake stream deleted (it expires anyway)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.close()
        try:
            await asyncio.wait_for(self._side().delete(self.wake_key), STOP_REDIS_SECONDS)
        except Exception as exc:  # Redis away (an API stopped during an outage): a line; anything else, a traceback
            # asyncio's timeout (Redis silent), a builtin TimeoutError, is an OSError: an outage too.
            silent = isinstance(exc, TimeoutError)
            reason = f"no answer within {STOP_REDIS_SECONDS:g} s" if silent else f"{type(exc).__name__}: {exc}"
            log.warning("event hub: could not delete its wake stream %s at stop (%s); it expires within %d s",
                        self.wake_key, reason, WAKE_TTL_SECONDS, exc_info=not isinstance(exc, _OUTAGE))


def redis_error(reply: Exception) -> Exception:
    """An error reply as redis-py's parsers raise it (its class from the reply's first word)."""
    return cast(Exception, BaseParser.parse_error(str(reply)))  # type: ignore[no-untyped-call]
