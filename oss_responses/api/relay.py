"""SSE out: the event log's frames relayed to one client, byte for byte.

Races, and who wins:
- the log ends (end marker) → the generator returns, sse-starlette closes the response;
- the client disconnects → sse-starlette cancels the generator; for a response the client itself
  runs (not background) that means "stop generating", so the ``finally`` requests a cancel,
  shielded from the cancellation that is unwinding it;
- the server shuts down (the hub stops) → the stream ends early; a non-background response is
  cancelled as on a disconnect (its client is cut off anyway), a background one runs on.

Each item the hub yields is already SSE bytes (the frames of one read, joined): :class:`FrameResponse`
keeps sse-starlette's pings, disconnect and shutdown handling but sends those bytes as they are,
without its per-chunk encoding, debug logging and per-send cancel scope (most of the API's CPU per
relayed chunk at 100 streams).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence

import anyio
from openai.types.responses import ResponseErrorEvent
from sse_starlette import EventSourceResponse
from starlette.types import Send

from oss_responses.api.jobs import cancel_if_running
from oss_responses.api.services import Services
from oss_responses.eventlog.frames import frame
from oss_responses.eventlog.hub import EventHubStopped, StreamLost
from oss_responses.harmony.emitter import EventEmitter
from oss_responses.metrics import ACTIVE_STREAMS
from oss_responses.storage import AsyncDatabase, get_event_log

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
    except EventHubStopped:
        log.info("event hub stopped while relaying %s", response_id)
    except StreamLost as lost:
        yield lost_stream_frame(response_id, lost)
    finally:
        ACTIVE_STREAMS.dec()
        if not ended and cancel_on_disconnect:
            with anyio.CancelScope(shield=True):
                await _cancel_quietly(services, response_id)


def lost_stream_frame(response_id: str, lost: StreamLost) -> bytes:
    """The last frame a client gets when Redis lost the stream it follows: an ``error`` event (the
    response itself ends ``failed`` in SQL once a worker or the reaper finds its progress gone)."""
    return frame(EventEmitter(lost.last_sequence + 1).emit(
        ResponseErrorEvent, code="event_log_lost", param=None,
        message=f"The event stream of response '{response_id}' was lost (its Redis lost its data); "
        "retrieve the response for its final state.",
    ))


class FrameResponse(EventSourceResponse):
    """An SSE response whose body items are complete SSE frames (bytes), sent unchanged."""

    async def _stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            if self.send_timeout is not None:  # the per-send timeout needs sse-starlette's own loop
                await self._send_chunks_with_timeout(send)
            else:
                async for chunk in self.body_iterator:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    chunk = b""  # not held while the next one is awaited
        except BaseException:
            await self._close_body()
            raise
        async with self._send_lock:
            self.active = False
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _close_body(self) -> None:
        """A send failed while the body generator waits at a yield: close it now, so its ``finally``
        (the cancel on disconnect) runs here rather than whenever it is garbage-collected."""
        aclose = getattr(self.body_iterator, "aclose", None)
        if aclose is not None:
            with anyio.move_on_after(self._cleanup_timeout, shield=True):
                try:
                    await aclose()
                except Exception:
                    log.exception("closing the relayed stream after a failed send failed")

    async def _send_chunks_with_timeout(self, send: Send) -> None:
        async for chunk in self.body_iterator:
            await self._send_with_timeout(send, {"type": "http.response.body", "body": chunk, "more_body": True})


async def _cancel_quietly(services: Services, response_id: str) -> None:
    try:
        await cancel_if_running(services, response_id)
    except Exception:  # the client is gone; nobody to report to
        log.exception("cancel of %s after client disconnect failed", response_id)


async def archived_frames(db: AsyncDatabase, response_id: str, after: int) -> list[bytes] | None:
    """The hub's archive reader: a finished response's frames after event ``after``, from SQL."""
    event_log = await db.run(get_event_log, response_id)
    return None if event_log is None else event_log.after(after)


async def relay(
    services: Services,
    response_id: str,
    *,
    head: Sequence[bytes] = (),
    after: int | None = None,
    cancel_on_disconnect: bool = False,
) -> EventSourceResponse:
    """Stream ``head`` (frames already in hand), then the log after event ``after``, to its end.

    Raises ``StreamNotFound`` here, before any byte is sent, if the response has no event log. With
    ``head``, the caller wrote those frames to the log itself: the log exists and nothing after ``after``
    needs reading from history, so the hub follows it live at once (one Redis round trip fewer).
    """
    log_frames = await services.hub.open(response_id, after=after, chunked=True, history=not head)
    frames = _frames(services, response_id, head, log_frames, cancel_on_disconnect)
    return FrameResponse(frames, ping=services.settings.stream_ping_seconds)
