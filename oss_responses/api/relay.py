"""SSE out: the event log's frames relayed to one client, byte for byte.

Races, and who wins:
- the log ends (end marker) → the generator returns, sse-starlette closes the response;
- the client disconnects → sse-starlette cancels the generator; for a response the client itself
  runs (not background) that means "stop generating", so the ``finally`` requests a cancel,
  shielded from the cancellation that is unwinding it;
- the server shuts down (the hub stops) → the stream ends early; a non-background response is
  cancelled as on a disconnect (its client is cut off anyway), a background one runs on.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence

import anyio
from sse_starlette import EventSourceResponse

from oss_responses.api.jobs import cancel_if_running
from oss_responses.api.services import Services
from oss_responses.eventlog.hub import EventHubStopped

log = logging.getLogger(__name__)


async def _frames(
    services: Services,
    response_id: str,
    head: Sequence[bytes],
    log_frames: AsyncIterator[bytes],
    cancel_on_disconnect: bool,
) -> AsyncIterator[bytes]:
    ended = False
    try:
        for chunk in head:
            yield chunk
        async for chunk in log_frames:
            yield chunk
        ended = True
    except EventHubStopped:
        log.info("event hub stopped while relaying %s", response_id)
    finally:
        if not ended and cancel_on_disconnect:
            with anyio.CancelScope(shield=True):
                await _cancel_quietly(services, response_id)


async def _cancel_quietly(services: Services, response_id: str) -> None:
    try:
        await cancel_if_running(services, response_id)
    except Exception:  # the client is gone; nobody to report to
        log.exception("cancel of %s after client disconnect failed", response_id)


async def relay(
    services: Services,
    response_id: str,
    *,
    head: Sequence[bytes] = (),
    after: int | None = None,
    cancel_on_disconnect: bool = False,
) -> EventSourceResponse:
    """Stream ``head`` (frames already in hand), then the log after event ``after``, to its end.

    Raises ``StreamNotFound`` here, before any byte is sent, if the response has no event log.
    """
    log_frames = await services.hub.open(response_id, after=after, chunked=True)
    frames = _frames(services, response_id, head, log_frames, cancel_on_disconnect)
    return EventSourceResponse(frames, ping=services.settings.stream_ping_seconds)
