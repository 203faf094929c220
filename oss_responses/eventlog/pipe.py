"""A Redis connection with one owner: bytes written the moment they are given, replies in order.

Redis answers a connection's commands in the order it received them, so a writer that owns one
connection can put a flush on the wire at once, from plain (non-async) code, while earlier flushes
still wait for their replies: TCP keeps the flushes in order, and nothing else writes there. That is
what lets :class:`~oss_responses.eventlog.writer.EventWriter` ship the first events of a long engine
step before the step's last token is translated. It also costs less than a pooled redis-py
connection per flush (no pool checkout, no per-reply coroutine; measured 42 against 84-99 us).
The API's :class:`~oss_responses.eventlog.hub.EventHub` reads on one too: its blocking XREAD, once or
twice per engine step, cost the API ~7 us less per relayed event than on redis-py's connection (8
streams: 29-35 against 39-42 us).

A connection is opened from a redis-py client's settings (host and port or unix socket, TLS,
credentials, database) and speaks RESP2. If it fails, every reply still awaited fails with
:class:`PipeBroken`, and the pipe is closed for good; the owner opens a new one.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any, cast

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection

from oss_responses.eventlog.bulk import pack


class PipeBroken(ConnectionError):
    """The pipe's connection failed or was closed before this reply came."""


class RedisPipe(asyncio.Protocol):
    """One Redis connection: :meth:`send` writes at once; each command's reply is a future, in order."""

    def __init__(self) -> None:
        self._reader = hiredis.Reader()
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._transport: asyncio.Transport | None = None
        self._broken: BaseException | None = None
        self.setup_replies: list[Any] = []  # the replies to ``open``'s setup commands, in order

    @classmethod
    async def open(cls, client: Redis, setup: list[list[bytes]]) -> RedisPipe:
        """Connect like ``client`` would, authenticate, select its database, then send ``setup``
        (e.g. SCRIPT LOAD); returns once all of that was answered without an error."""
        pool = client.connection_pool
        options: dict[str, Any] = pool.connection_kwargs
        loop = asyncio.get_running_loop()
        if issubclass(pool.connection_class, UnixDomainSocketConnection):
            _, pipe = await loop.create_unix_connection(cls, options["path"])
        else:
            context = _tls_context(options) if issubclass(pool.connection_class, SSLConnection) else None
            _, pipe = await loop.create_connection(
                cls, options.get("host", "localhost"), options.get("port", 6379), ssl=context
            )
        try:
            await pipe._handshake(options, setup)
        except BaseException:
            pipe.close()
            raise
        return pipe

    async def _handshake(self, options: dict[str, Any], setup: list[list[bytes]]) -> None:
        commands = []
        if options.get("password") is not None:
            commands.append([b"AUTH", *[_bytes(options[key]) for key in ("username", "password") if options.get(key)]])
        if options.get("db"):
            commands.append([b"SELECT", _bytes(options["db"])])
        commands += setup
        replies = await asyncio.gather(*self.send(b"".join(pack(c) for c in commands), len(commands)))
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        self.setup_replies = replies[len(commands) - len(setup):]

    @property
    def usable(self) -> bool:
        return self._broken is None and self._transport is not None

    def send(self, payload: bytes, replies: int) -> list[asyncio.Future[Any]]:
        """Write ``payload`` (``replies`` commands) now; a future per reply. An error reply is the
        future's result (a ``hiredis.ReplyError``), a broken connection its exception."""
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(replies)]
        if self._broken is not None or self._transport is None:
            for future in futures:
                future.set_exception(PipeBroken("the event writer's Redis connection is closed"))
            return futures
        self._waiting.extend(futures)
        try:
            self._transport.write(payload)
        except Exception as exc:  # closed under us, its loss not reported yet (uvloop raises here)
            self._fail(PipeBroken(f"the event writer's Redis connection is closed: {exc!r}"))
        return futures

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._fail(PipeBroken("the event writer's Redis connection was closed"))

    def abort(self, why: str) -> None:
        """Close at once, dropping what is not sent yet: a connection given up on for its silence, whose
        send buffer may never drain (``close`` waits for it)."""
        if self._transport is not None:
            self._transport.abort()
        self._fail(PipeBroken(f"the event writer's Redis connection was given up: {why}"))

    # --- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        try:
            while (reply := self._reader.gets()) is not False:
                future = self._waiting.popleft()
                if not future.done():
                    future.set_result(reply)
        except (hiredis.ProtocolError, IndexError) as exc:  # not Redis, or a reply nobody asked for
            self._fail(PipeBroken(f"unreadable reply from Redis: {exc!r}"))
            if self._transport is not None:
                self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(PipeBroken(f"the Redis connection was lost: {exc!r}" if exc else
                              "Redis closed the connection"))

    def _fail(self, error: PipeBroken) -> None:
        if self._broken is None:
            self._broken = error
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _tls_context(options: dict[str, Any]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=options.get("ssl_ca_certs"))
    if options.get("ssl_certfile"):
        context.load_cert_chain(options["ssl_certfile"], options.get("ssl_keyfile"))
    if options.get("ssl_cert_reqs") in ("none", ssl.CERT_NONE):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
