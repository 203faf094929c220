"""A raw HTTP/1.1 + SSE client on asyncio protocols: cheap enough per event not to be the bottleneck.

One connection per request (``Connection: close``). The body's chunked encoding is decoded in
``data_received``; each decoded piece goes to ``on_data(piece, t)`` with ``t`` = ``time.monotonic()``
when the bytes came off the socket (CLOCK_MONOTONIC: comparable with other processes' clocks).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

OnData = Callable[[bytes, float], None]


class HttpError(RuntimeError):
    pass


class _Protocol(asyncio.Protocol):
    def __init__(self, on_data: OnData, on_head: Callable[[float], None] | None) -> None:
        self.on_data = on_data
        self.on_head = on_head
        self.buf = b""
        self.head_done = False
        self.chunked = False
        self.remaining = 0  # bytes of the current chunk still to come
        self.skip = 0  # CRLF after a chunk
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        t = time.monotonic()
        if not self.head_done:
            self.buf += data
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data, self.buf = self.buf[:end], self.buf[end + 4 :], b""
            self.head_done = True
            status = head.split(b" ", 2)[1]
            if status != b"200":
                self._finish(HttpError(f"HTTP {status.decode()}: {data[:300]!r}"))
                return
            self.chunked = b"transfer-encoding: chunked" in head.lower()
            if self.on_head is not None:
                self.on_head(t)
        if not self.chunked:
            if data:
                self.on_data(data, t)
            return
        self._chunks(data, t)

    def _chunks(self, data: bytes, t: float) -> None:
        buf = self.buf + data if self.buf else data
        self.buf = b""
        pos, n = 0, len(buf)
        while pos < n:
            if self.skip:
                step = min(self.skip, n - pos)
                pos += step
                self.skip -= step
                continue
            if self.remaining:
                take = min(self.remaining, n - pos)
                self.on_data(buf[pos : pos + take], t)
                pos += take
                self.remaining -= take
                if not self.remaining:
                    self.skip = 2
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                self.buf = buf[pos:]
                return
            size = int(buf[pos:eol].split(b";")[0], 16)
            pos = eol + 2
            if size == 0:
                self._finish(None)
                return
            self.remaining = size

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(exc if exc and not self.done.done() else None)

    def _finish(self, exc: BaseException | None) -> None:
        if not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


class Request:
    """One request; ``await req.wait()`` until the body ends; ``req.close()`` hangs up early."""

    def __init__(self, protocol: _Protocol) -> None:
        self.protocol = protocol

    async def wait(self) -> None:
        await self.protocol.done

    def close(self) -> None:
        self.protocol._finish(None)


async def request(
    host: str, port: int, method: str, path: str, body: Any = None, *,
    on_data: OnData, on_head: Callable[[float], None] | None = None,
) -> Request:
    loop = asyncio.get_running_loop()
    payload = b"" if body is None else json.dumps(body).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\nAccept: text/event-stream\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
    _, protocol = await loop.create_connection(lambda: _Protocol(on_data, on_head), host, port)
    assert protocol.transport is not None
    protocol.transport.write(head + payload)
    return Request(protocol)


class FrameSplitter:
    """Splits SSE bytes into frames (``event: ...\\ndata: ...``), calling ``on_frame(frame, t)``."""

    def __init__(self, on_frame: Callable[[bytes, float], None]) -> None:
        self.on_frame = on_frame
        self.buf = b""

    def __call__(self, data: bytes, t: float) -> None:
        buf = self.buf + data if self.buf else data
        start = 0
        while (end := buf.find(b"\n\n", start)) >= 0:
            if buf.startswith(b"event: ", start):
                self.on_frame(buf[start:end], t)
            start = end + 2
        self.buf = buf[start:]


class FrameCounter:
    """Counts SSE frames (``\\n\\n`` terminators; pings end in ``\\r\\n\\r\\n``) at C speed."""

    def __init__(self) -> None:
        self.frames = 0
        self.carry = b""

    def __call__(self, data: bytes, t: float) -> None:
        if self.carry:
            data = self.carry + data
        self.frames += data.count(b"\n\n")
        self.carry = b"\n" if data.endswith(b"\n") and not data.endswith(b"\n\n") else b""


def event_type(frame: bytes) -> bytes:
    return frame[7 : frame.index(b"\n")]


def sequence_number(frame: bytes) -> int:
    """The event's sequence_number (a delta frame has exactly one)."""
    at = frame.rindex(b'"sequence_number":') + 18
    end = at
    while frame[end : end + 1].isdigit():
        end += 1
    return int(frame[at:end])
