"""A response's life as the API drives it: accept (row + items, opening events, task), cancel,
wait for the end, and read it back.

Ordering that matters:
- accept: the request's MCP servers are resolved first (a refused one is a 400 and nothing is
  stored); the row and its input items are committed before the opening events are written and the
  task is sent, so a worker (or a GET on another replica) never sees a task without its row.
- cancel: the flag is set and published *before* the queued → cancelled compare-and-set; a worker
  that takes the task in between sees the flag, and one that took it before is reached by the
  publish. Only the side that wins the compare-and-set ends the stream.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from oss_responses import redis_keys
from oss_responses.api.queued import QueuedResponse
from oss_responses.api.services import Services
from oss_responses.errors import BadRequest, NotFound
from oss_responses.eventlog.frames import frame, parse_frame
from oss_responses.eventlog.hub import StreamNotFound
from oss_responses.eventlog.writer import write_events
from oss_responses.harmony.lifecycle import opening_events
from oss_responses.storage import (
    ResponseRecord,
    delete_response,
    get_response,
    insert_response,
    transition,
    utcnow,
)
from oss_responses.tools.policy import resolve_servers
from oss_responses.wire import wire_json

log = logging.getLogger(__name__)

TERMINAL_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete"})


def not_found(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id")


async def load_visible(services: Services, response_id: str) -> ResponseRecord:
    """A response a client may read: stored (store=true) and not deleted."""
    record = await services.db.run(get_response, response_id)
    if record is None or not record.store:
        raise not_found(response_id)
    return record


async def check_previous(services: Services, previous_response_id: str | None) -> None:
    if previous_response_id is None:
        return
    record = await services.db.run(get_response, previous_response_id)
    if record is None or not record.store:
        raise NotFound(f"Previous response with id '{previous_response_id}' not found.", param="previous_response_id")
    if not record.is_terminal:
        raise BadRequest(
            f"Previous response with id '{previous_response_id}' is still {record.status}.",
            param="previous_response_id",
        )


async def accept(services: Services, queued: QueuedResponse) -> list[bytes]:
    """Check its tool servers, store, open the event log, enqueue; the opening frames (the client's first events)."""
    response = queued.response
    # The worker resolves them again (with the credentials); here a refusal is the client's 400, not a failed response.
    await resolve_servers(response.tools, services.settings)
    record = ResponseRecord(
        id=response.id,
        model=response.model,
        status="queued",
        background=bool(response.background),
        store=bool(queued.request.get("store", True)),
        request=queued.request,
        response=wire_json(response),
        previous_response_id=response.previous_response_id,
    )
    await services.db.run(insert_response, record, queued.input_items)
    events = opening_events(response)
    await write_events(services.redis, response.id, events)
    await services.tasks.run_response(response.id, queued.secrets, services.settings.queue_for(response.model))
    return [frame(event) for event in events]  # type: ignore[arg-type]


async def request_cancel(services: Services, record: ResponseRecord) -> bool:
    """Ask every worker to stop the response; cancel it here if still queued (True if this did)."""
    ttl = services.settings.event_ttl_seconds
    async with services.redis.pipeline(transaction=False) as pipe:
        pipe.set(redis_keys.cancel(record.id), "1", ex=ttl)
        pipe.publish(redis_keys.CANCEL_CHANNEL, record.id)
        await pipe.execute()
    cancelled = record.response | {"status": "cancelled"}
    won = await services.db.run(
        transition, record.id, from_statuses=("queued",), to_status="cancelled",
        response=cancelled, completed_at=utcnow(),
    )
    if won:
        await write_events(services.redis, record.id, [], close="cancelled", ttl_seconds=ttl)
    return won


async def cancel_if_running(services: Services, response_id: str) -> None:
    """The client that ran a (non-background) response left: stop it."""
    record = await services.db.run(get_response, response_id)
    if record is not None and not record.is_terminal:
        await request_cancel(services, record)


async def wait_for_end(services: Services, response_id: str, after: int | None) -> dict[str, Any] | None:
    """Follow the event log to its end marker; the last event's payload (None if there was none)."""
    last: bytes | None = None
    try:
        async for chunk in services.hub.subscribe(response_id, after=after):
            last = chunk
    except StreamNotFound:
        log.warning("event stream of %s is gone; reading the response from SQL", response_id)
    return parse_frame(last) if last else None


async def final_response(services: Services, response_id: str, last_event: dict[str, Any] | None) -> dict[str, Any]:
    """The response after its stream ended: from SQL, or from its terminal event if SQL lags."""
    record = await services.db.run(get_response, response_id)
    if record is not None and record.is_terminal:
        return public_json(record)
    if last_event is not None and last_event.get("type") in TERMINAL_EVENTS:
        return dict(last_event["response"])
    if record is not None:
        return public_json(record)
    raise not_found(response_id)


async def wait_and_read(services: Services, response_id: str, after: int | None, timeout: float) -> dict[str, Any]:
    """The response once ended, or as it is now after ``timeout`` seconds."""
    try:
        last = await asyncio.wait_for(wait_for_end(services, response_id, after), timeout)
    except TimeoutError:
        last = None
    return await final_response(services, response_id, last)


async def remove(services: Services, record: ResponseRecord) -> None:
    if not record.is_terminal:
        await request_cancel(services, record)
    if not await services.db.run(delete_response, record.id):
        raise not_found(record.id)


def public_json(record: ResponseRecord) -> dict[str, Any]:
    """The Response JSON a client gets; with vLLM's ``enable_response_messages``, the harmony messages."""
    body = dict(record.response)
    if record.request.get("enable_response_messages"):
        body["input_messages"] = record.input_messages
        body["output_messages"] = record.output_messages
    return body


def queued_json(queued: QueuedResponse) -> dict[str, Any]:
    body = wire_json(queued.response)
    if queued.request.get("enable_response_messages"):
        body |= {"input_messages": [], "output_messages": []}
    return body

