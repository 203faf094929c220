"""The API's connections: uvicorn's httptools protocol with the bounds it lacks, on a request's headers and on
the time it may take to send it.

uvicorn reads headers with no size limit (httptools joins a header's value chunk by chunk, so one header of
64 MiB took 8 s of the event loop, every other client waiting, and held its bytes; half-sent header blocks
were held until the client left) and with no deadline (a connection that sent nothing, part of its headers
or part of its body stayed open for good, before any API key was checked, and a stopping API waited for it).
So, per connection:

- a request's headers larger than ``max_header_bytes`` are answered 431 and the connection closed (counted
  as they arrive, before httptools has joined them, and once parsed: a block read whole in one chunk was
  never counted);
- headers or a body not received whole within ``read_seconds`` of their start: 408, closed;
- a connection idle between two requests for ``keep_alive_seconds`` is closed (uvicorn's 5 s, shorter than a
  load balancer's idle timeout, closed connections the balancer then sent a request on: its 502);
- a server that stops closes a connection whose request body is still arriving (uvicorn would wait for it);
- a request pipelined behind a response under way gets its body's deadline when its turn comes (uvicorn reads
  nothing of it until then), and a connection lost tells every request on it, not only the last one read;
- a client that reads nothing of its answer for ``send_stall_seconds`` (the connection's send buffer full
  all along) is disconnected: an event stream's relay waited on it for good, holding its stream slot, and
  the frames it could not send stayed in memory.

Each refusal carries what the app's middlewares add to its answers: ``x-request-id`` and, for an allowed
``Origin`` among the headers read by then, CORS headers (a browser's page reads it, instead of a network error).

The app sees a closed request as a disconnect (``http.disconnect``), as when the client leaves.

Each request also carries its :class:`DirectBody` (a scope extension), through which the event hub writes a
relayed stream's frames to its client without waking the request's task.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
import weakref
from collections.abc import Callable, Iterable, MutableMapping
from functools import partial
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from oss_responses.errors import BadRequest
from oss_responses.socket_direct import DirectWebSocketProtocol

if TYPE_CHECKING:
    from oss_responses.config import Settings

log = logging.getLogger(__name__)

_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}

REQUEST_ID = b"x-request-id"
_REQUEST_ID_KEPT = re.compile(rb"[A-Za-z0-9._:/+=-]{1,128}")  # anything else is replaced: it goes into every log line
# The headers a browser's page may read of every answer (the app's CORS middleware and the refusals below).
CORS_EXPOSED = ("x-request-id", "retry-after")


def request_id_from(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The request's ``x-request-id`` if it is a plain token, else a new one."""
    for name, value in headers:
        if name == REQUEST_ID and _REQUEST_ID_KEPT.fullmatch(value):
            return bytes(value).decode()
    return f"req_{uuid.uuid4().hex}"


def refusal_headers(headers: list[tuple[bytes, bytes]], allowed_origins: frozenset[str]) -> bytes:
    """What the app's middlewares add to every answer, for an answer the protocol writes itself: the request id,
    and CORS headers for an allowed ``Origin`` among the headers read so far (as Starlette's CORS writes them)."""
    lines = [b"x-request-id: " + request_id_from(headers).encode()]
    origin = next((value for name, value in headers if name == b"origin"), None)
    if origin is not None and ("*" in allowed_origins or origin.decode("latin-1") in allowed_origins):
        lines += [b"access-control-allow-origin: " + (b"*" if "*" in allowed_origins else origin),
                  b"access-control-expose-headers: " + ", ".join(CORS_EXPOSED).encode(), b"vary: Origin"]
    return b"".join(line + b"\r\n" for line in lines)


def error_bytes(status: int, message: str, code: str, headers: bytes = b"") -> bytes:
    """A whole HTTP/1.1 response carrying an OpenAI-style error, after which the connection closes; ``headers``:
    more header lines, each ending in CRLF."""
    body = json.dumps(BadRequest(message, code=code).to_body()).encode()  # its shape; the status is ours
    head = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n%s\r\n"
            % (status, _REASONS[status], len(body), headers))
    return head + body


# The scope's extension that holds a request's DirectBody (ASGI: an extension is a dict), under "writer";
# absent where another server runs the app.
DIRECT_BODY = "oss_responses.direct_body"


class DirectBody:
    """A response's body written to its connection as uvicorn's ``send`` writes it, from outside the app's
    task: the event hub's dispatch writes a read's frames to each client that waits for them
    (``eventlog.following.Sink``), where a wake of the client's task, four generators and an ASGI ``send``
    through every middleware cost more than the write itself (a third of the API's CPU per relayed event,
    ``bench/service.py`` (b)). Only a chunked body that has started and not ended, on a connection that takes
    bytes without waiting: anything else is refused, and goes the way of ``send``, which waits. Middlewares
    see the response's start and end, not these writes: none of the API's rewrites a body.

    It holds its cycle weakly: the cycle holds the scope, which holds this, and a strong reference would make
    every request a reference cycle, left to the garbage collector's passes (which stop the process)."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = weakref.ref(cycle)

    def offer(self, data: bytes) -> bool:
        cycle = self._cycle()
        if (not data  # an empty chunk is the body's end, which is uvicorn's to write
                or cycle is None or cycle.disconnected or cycle.flow.write_paused or not cycle.response_started
                or cycle.response_complete or not cycle.chunked_encoding or cycle.transport.is_closing()):
            return False
        cycle.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        return True


def direct_body(scope: MutableMapping[str, Any]) -> DirectBody | None:
    """The request's :class:`DirectBody`, where this module's protocol serves it."""
    writer = scope.get("extensions", {}).get(DIRECT_BODY, {}).get("writer")
    return writer if isinstance(writer, DirectBody) else None


class BoundedHttpProtocol(HttpToolsProtocol):
    """Built by uvicorn per connection (``http=`` a ``functools.partial`` giving the two bounds)."""

    def __init__(
        self, *args: Any, max_header_bytes: int, read_seconds: float, send_stall_seconds: float = 0,
        keep_alive_seconds: float | None = None, allowed_origins: Iterable[str] = (), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.allowed_origins = frozenset(allowed_origins)
        self.max_header_bytes = max_header_bytes
        self.read_seconds = read_seconds
        self.keep_alive_seconds = read_seconds if keep_alive_seconds is None else keep_alive_seconds
        self.send_stall_seconds = send_stall_seconds
        self._stall_timer: asyncio.TimerHandle | None = None
        self._reading_headers = False  # a request has begun and its headers are not all here
        self._header_bytes = 0
        self._parsed_header_bytes = 0  # of the request being parsed: its URL, names and values, and their framing
        self._refused = False  # answered 431 while parsing: what httptools still parses of the chunk is dropped
        self._body_bytes_fed = 0  # of the data being fed now: what httptools handed on as body
        self._read_timer: asyncio.TimerHandle | None = None
        self._idle = False  # the timer armed is the keep-alive between two requests, not a request's deadline
        # The requests read on this connection whose responses have not ended: the one under way, then any
        # pipelined behind it. uvicorn keeps only the last read (``cycle``).
        self._open_cycles: list[RequestResponseCycle] = []

    # --- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self._headers_late)  # a connection that never sends a request is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._writing_resumed()
        super().connection_lost(exc)
        # uvicorn tells only the last request read: one pipelined behind a stream left the stream's relay
        # unaware, writing to the closed transport (uvloop raises there).
        for cycle in self._open_cycles:
            if not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()
        self._open_cycles.clear()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.send_stall_seconds and self._stall_timer is None:
            self._stall_timer = self.loop.call_later(self.send_stall_seconds, self._stalled)

    def resume_writing(self) -> None:
        self._writing_resumed()
        super().resume_writing()

    def data_received(self, data: bytes) -> None:
        self._body_bytes_fed = 0
        super().data_received(data)
        if self._reading_headers and not self.transport.is_closing():
            self._header_bytes += len(data) - self._body_bytes_fed
            if self._header_bytes > self.max_header_bytes:
                self._refuse(431, f"The request's headers exceed {self.max_header_bytes} bytes.",
                             "request_headers_too_large")

    def send_400_response(self, msg: str) -> None:
        """What httptools cannot parse: uvicorn answered it in text/plain, where every other error the API
        gives is OpenAI's JSON."""
        self._refuse(400, "The request is not valid HTTP/1.1.", "invalid_http_request")

    def shutdown(self) -> None:
        if self._body_arriving():
            self._end_cycle()  # the app's receive() sees a disconnect; uvicorn no longer waits for the body
            self.transport.close()
            return
        super().shutdown()

    # --- httptools callbacks ----------------------------------------------------------------------
    def handle_websocket_upgrade(self) -> None:
        if self._refused:  # its handshake's headers were over the limit: answered 431
            return
        self._disarm()  # the WebSocket protocol takes the connection over
        super().handle_websocket_upgrade()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_headers, self._header_bytes, self._parsed_header_bytes = True, 0, 0
        if self._read_timer is None or self._idle:
            self._arm(self._headers_late)  # from the request's first byte, not from the idle time before it

    def on_url(self, url: bytes) -> None:
        self._parsed_header_bytes += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._parsed_header_bytes += len(name) + len(value) + len(b": \r\n")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._reading_headers = False
        # The request line's method, spaces and version, and the blank line: then the block as sent (but for
        # optional whitespace around values). data_received counts only what is still unparsed after a chunk,
        # so a block that ends within the chunk that brought it is held to the limit here.
        size = self._parsed_header_bytes + len(self.parser.get_method()) + len(b"  HTTP/1.1\r\n\r\n")
        if self._refused or size > self.max_header_bytes:  # (a request pipelined behind a refused one: dropped)
            self._refused = True
            if not self.transport.is_closing():
                self._refuse(431, f"The request's headers exceed {self.max_header_bytes} bytes.",
                             "request_headers_too_large")
            return  # no request is run: uvicorn builds none before its on_headers_complete
        self._arm(self._body_late)
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # a request the app will run (not an upgrade)
            self.scope.setdefault("extensions", {})[DIRECT_BODY] = {"writer": DirectBody(cycle)}
            self._open_cycles = [c for c in self._open_cycles if not c.response_complete] + [cycle]
            if self.pipeline:
                self._disarm()  # queued: uvicorn reads no more of it until its turn (on_response_complete)

    def on_body(self, body: bytes) -> None:
        self._body_bytes_fed += len(body)
        if not self._refused:  # a refused request has no cycle to take its body
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        if not self._refused:
            super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # starts the next pipelined request, if any, and reads on
        self._open_cycles = [c for c in self._open_cycles if not c.response_complete]
        if self.transport.is_closing():
            return
        if self._body_arriving():
            self._arm(self._body_late)  # a pipelined request's turn: its body's deadline starts now
        else:
            # uvicorn's keep-alive timer is reset by every byte; this is not
            self._arm(self._headers_late, self.keep_alive_seconds, idle=True)

    # --- deadlines --------------------------------------------------------------------------------
    def _headers_late(self) -> None:
        self._read_timer = None
        if self._reading_headers:
            self._refuse(408, f"The request's headers did not arrive within {self.read_seconds:g} s.",
                         "request_timeout")
        elif self.cycle is None or self.cycle.response_complete:
            self.transport.close()  # idle: no request begun

    def _body_late(self) -> None:
        self._read_timer = None
        if self._body_arriving():
            self._end_cycle()
            self._refuse(408, f"The request body did not arrive within {self.read_seconds:g} s.", "request_timeout")

    def _writing_resumed(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _stalled(self) -> None:
        """Aborted, not closed: a close would wait to flush the buffer the client does not read."""
        self._stall_timer = None
        log.info("a client read nothing for %g s: its connection is dropped", self.send_stall_seconds)
        self.transport.abort()

    def _body_arriving(self) -> bool:
        cycle = self.cycle
        return cycle is not None and cycle.more_body and not cycle.response_complete and not self._reading_headers

    def _end_cycle(self) -> None:
        """The app's request ends as if its client had left: its sends are dropped from now on."""
        self.cycle.disconnected = True
        self.cycle.message_event.set()

    def _refuse(self, status: int, message: str, code: str) -> None:
        self._disarm()
        # An answer only where no other response is under way on this connection: written into its body,
        # it would corrupt it.
        if not any(c.response_started and not c.response_complete for c in self._open_cycles):
            # The request's headers read so far (uvicorn's list, of the request being read): a page reads it too.
            headers = refusal_headers(getattr(self, "headers", []), self.allowed_origins)
            self.transport.write(error_bytes(status, message, code, headers))
        self.transport.close()

    def _arm(self, deadline: Callable[[], None], seconds: float | None = None, *, idle: bool = False) -> None:
        self._disarm()
        self._idle = idle
        self._read_timer = self.loop.call_later(self.read_seconds if seconds is None else seconds, deadline)

    def _disarm(self) -> None:
        self._idle = False
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for the API's connections, in one process or several.

    The protocol is outside ``oss_responses.api`` (whose package imports the whole app) because uvicorn's
    supervisor pickles it into each process it spawns: unpickled before the process answers the
    supervisor's health check, importing the app there took over its 5 s under load, and the process was
    killed and started again."""
    protocol = partial(BoundedHttpProtocol, max_header_bytes=settings.max_header_bytes,
                       read_seconds=settings.request_read_seconds, send_stall_seconds=settings.send_stall_seconds,
                       keep_alive_seconds=settings.keep_alive_seconds, allowed_origins=settings.allowed_origins)
    # A WebSocket message is a request body: the same size limit (uvicorn closes with 1009 past it).
    # uvicorn's own keep-alive timer (5 s by default) would close an idle connection before ours.
    return {"http": protocol, "ws": DirectWebSocketProtocol, "ws_max_size": settings.max_body_bytes,
            "timeout_keep_alive": settings.keep_alive_seconds}
