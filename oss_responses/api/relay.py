"""SSE out: the event log's frames relayed to one client, byte for byte.

Races, and who wins:
- the log ends (end marker) → the response completes;
- the client disconnects → the sending is cancelled; for a response the client itself runs (not
  background) that means "stop generating", so the ``finally`` requests a cancel, shielded from the
  cancellation that is unwinding it;
- the API is told to stop → its hub ends every client's stream (``api/draining.py``) and the stream is
  cut (no final chunk: the client sees it broken, and resumes with ``starting_after`` elsewhere); a
  non-background response is cancelled as on a disconnect (its client is cut off anyway), a
  background one runs on.

:class:`FrameStream` keeps sse-starlette's headers but not its four tasks per response (sender,
pinger, shutdown listener, disconnect listener, in an anyio task group): ~15 KB of every open
stream's memory (``bench/service.py`` (d): 49 → 34-39 KB). The request's own task sends, one task
listens for the disconnect, the hub times the keep-alive pings (one timer for the process) and the
stop signal reaches the hub. Each body item is already SSE bytes (the frames of one read, joined),
sent as it is. While the client keeps up, the hub writes each read's frames to its connection itself
(:class:`ClientSink`, ``http_protocol.DirectBody``) and the task sleeps on; it sends what the hub could
not write at once (a full send buffer), the opening frames and the end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import anyio
from openai.types.responses import ResponseErrorEvent
from sse_starlette import EventSourceResponse
from starlette.types import Receive, Scope, Send

from oss_responses.api.errors import DATABASE_UNREACHABLE
from oss_responses.api.jobs import cancel_if_running
from oss_responses.api.services import Services
from oss_responses.api.stream_slots import Release
from oss_responses.eventlog.frames import frame
from oss_responses.eventlog.history import patiently
from oss_responses.eventlog.losses import (
    ArchiveLost,
    ArchiveUnreadable,
    EventHubStopped,
    StreamLost,
    StreamOverwritten,
    StreamRewound,
)
from oss_responses.harmony.emitter import EventEmitter
from oss_responses.http_protocol import DirectBody, direct_body
from oss_responses.logs import note_stream_cut
from oss_responses.metrics import ACTIVE_STREAMS
from oss_responses.storage import AsyncDatabase, get_event_log
from oss_responses.storage.event_logs import EventLog

log = logging.getLogger(__name__)



async def _frames(
    services: Services,
    response_id: str,
    head: Sequence[bytes],
    log_frames: AsyncIterator[bytes],
    cancel_on_disconnect: bool,
) -> AsyncIterator[bytes]:
    ended = False
    ACTIVE_STREAMS.inc()
    try:
        for chunk in head:
            yield chunk
        head = ()  # sent: an open stream holds no frame it sent (see EventHub._frames)
        async for chunk in log_frames:
            yield chunk
            chunk = b""
        ended = True
    except StreamLost as lost:
        yield lost_stream_frame(response_id, lost)
    finally:
        ACTIVE_STREAMS.dec()
        if not ended and cancel_on_disconnect:
            with anyio.CancelScope(shield=True):
                await _cancel_quietly(services, response_id)


def lost_stream_frame(response_id: str, lost: StreamLost) -> bytes:
    """The last frame a client gets when Redis lost the stream it follows: an ``error`` event (the
    response itself ends ``failed`` in SQL once a worker or the reaper finds its progress gone); or
    when the rest of an archived stream could not be read from SQL (the events are there: it resumes)."""
    if isinstance(lost, ArchiveUnreadable):
        code, message = "event_log_unavailable", (
            f"The rest of the event stream of response '{response_id}' could not be read (its database did not "
            f"answer); resume it with starting_after={lost.last_sequence}, or retrieve the response.")
    elif isinstance(lost, StreamRewound):
        code, message = "event_log_lost", (
            f"The event stream of response '{response_id}' came back shorter than what was sent to you (its Redis "
            "was restored from an earlier state): the response goes on, its later events written anew, and they may "
            "differ from those you got. Replay the stream from its start, or retrieve the response once it ends.")
    elif isinstance(lost, StreamOverwritten):
        code, message = "event_log_lost", (
            f"The event stream of response '{response_id}' was overwritten in its Redis (its key holds something "
            "other than a stream); retrieve the response for its final state.")
    elif isinstance(lost, ArchiveLost):
        code, message = "event_log_lost", (
            f"The rest of the event stream of response '{response_id}' is gone from the database (restored to an "
            "earlier point?); retrieve the response for its final state.")
    else:
        code, message = "event_log_lost", (
            f"The event stream of response '{response_id}' was lost (its Redis lost its data); "
            "retrieve the response for its final state.")
    return frame(EventEmitter(lost.last_sequence + 1).emit(ResponseErrorEvent, code=code, param=None, message=message))


class FrameStream(EventSourceResponse):
    """An SSE response whose body items are complete SSE frames (bytes), sent unchanged (a quiet stream's
    keepalive event among them: the hub's heartbeat). The body ends the response: exhausted, it completes;
    raising :class:`EventHubStopped`, it is cut."""

    _client_left = False  # set by the listener when it cancels the sending task
    release: Release | None = None  # gives the owner's stream slot back once the response is done
    sink: ClientSink | None = None  # where the hub writes frames itself once the response has started

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # sse-starlette's "Connection: keep-alive" is uvicorn's to say (hop-by-hop): to a client that sent
        # "Connection: close" both went out.
        self.raw_headers = [(name, value) for name, value in self.raw_headers if name != b"connection"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        if self.sink is not None:
            self.sink.writer = direct_body(scope)
        sending = asyncio.current_task()
        assert sending is not None
        listener = asyncio.create_task(self._cancel_on_disconnect(receive, sending))
        try:
            await self._send_body(send)
        except asyncio.CancelledError:
            if not self._client_left or sending.uncancel() > 0:  # not (only) the listener's cancel
                raise
        except EventHubStopped:
            log.info("the API is stopping: the stream it was relaying is cut")
            note_stream_cut()
        finally:
            self.active = False  # before any await: the listener cancels nothing from here on
            if self.sink is not None:
                self.sink.writer = None  # the end goes through send, and nothing after it
            listener.cancel()
            if self.release is not None:
                self.release()
            await self._close_body()

    async def _send_body(self, send: Send) -> None:
        async for chunk in self.body_iterator:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            chunk = b""  # not held while the next one is awaited
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _cancel_on_disconnect(self, receive: Receive, sending: asyncio.Task[Any]) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass  # the request's (empty) body
        if self.active:
            self._client_left = True
            sending.cancel()

    async def _close_body(self) -> None:
        """Close the body generator now if it waits at a yield (a cancelled send), so that its
        ``finally`` (the cancel on disconnect) runs here rather than whenever it is garbage-collected."""
        aclose = getattr(self.body_iterator, "aclose", None)
        if aclose is not None:
            with anyio.move_on_after(self._cleanup_timeout, shield=True):
                try:
                    await aclose()
                except Exception:
                    log.exception("closing the relayed stream failed")


class ClientSink:
    """A relayed stream's client connection, as the event hub writes to it (``eventlog.following.Sink``):
    bound by :class:`FrameStream` to the request's :class:`DirectBody` from the response's start to its end,
    refusing everything otherwise (and under a server without one), so that those frames go through ``send``."""

    __slots__ = ("writer",)

    def __init__(self) -> None:
        self.writer: DirectBody | None = None

    def offer(self, data: bytes) -> bool:
        writer = self.writer
        return writer is not None and writer.offer(data)


async def _cancel_quietly(services: Services, response_id: str) -> None:
    try:
        await cancel_if_running(services, response_id)
    except Exception:  # the client is gone; nobody to report to
        log.exception("cancel of %s after client disconnect failed", response_id)


async def archived_frames(
    db: AsyncDatabase, response_id: str, after: int, joined: bool = False
) -> Iterator[list[bytes]] | None:
    """The hub's archive reader: a finished response's frames after event ``after``, from SQL, in pages
    decompressed as they are sent (the log stays compressed in memory: ~1/50 of its frames' bytes)."""
    event_log = await _read_event_log(db, response_id)
    return None if event_log is None else event_log.pages_after(after, joined=joined)


ARCHIVE_OUTAGE_SECONDS = 30.0  # as long as the hub waits for Redis (EventHub's outage_seconds)


async def _read_event_log(db: AsyncDatabase, response_id: str) -> EventLog | None:
    """The archived log, read again while the database does not answer (a restart, a full pool), as the
    hub reads Redis again: a replay must not end early for a blip."""
    return await patiently(lambda: db.run(get_event_log, response_id), DATABASE_UNREACHABLE,
                           ARCHIVE_OUTAGE_SECONDS, f"the archived event log of {response_id}")


async def relay(
    services: Services,
    response_id: str,
    *,
    head: Sequence[bytes] = (),
    after: int | None = None,
    cancel_on_disconnect: bool = False,
    release: Release | None = None,
) -> EventSourceResponse:
    """Stream ``head`` (frames already in hand), then the log after event ``after``, to its end.

    Raises ``StreamNotFound`` here, before any byte is sent, if the response has no event log. With
    ``head``, the caller wrote those frames to the log itself: the log exists and nothing after ``after``
    needs reading from history, so the hub follows it live at once (one Redis round trip fewer).
    """
    sink = ClientSink()
    log_frames = await services.hub.open(response_id, after=after, chunked=True, history=not head,
                                           client_stream=True, sink=sink)
    stream = FrameStream(_frames(services, response_id, head, log_frames, cancel_on_disconnect))
    stream.release = release
    stream.sink = sink
    return stream
