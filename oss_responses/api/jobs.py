"""A response's life as the API drives it: accept (row + items, opening events, task), cancel,
wait for the end, and read it back.

Ordering that matters:
- accept: the request's MCP servers are resolved first (a refused one is a 400 and nothing is
  stored); the row and its input items are committed before the opening events are written and the
  task is sent, so a worker (or a GET on another replica) never sees a task without its row.
- ownership: a response another owner's key made is reported exactly as an unknown one (404), by
  every read here and by a chain that would continue it (``api/auth.py``).
- background limit: an owned background response is inserted and its owner's responses in flight
  counted in one transaction; over the key's limit it rolls back, before any event or task (429).
- cancel: the flag is set and published *before* the queued → cancelled compare-and-set; a worker
  that takes the task in between sees the flag, and one that took it before is reached by the
  publish. Only the side that wins the compare-and-set ends the stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import anyio
from kombu.exceptions import OperationalError
from openai.types.responses import Response
from openai.types.responses.response_input_item import ItemReference
from redis.exceptions import RedisError
from sqlalchemy.exc import IntegrityError

from oss_responses import redis_keys
from oss_responses.api.auth import Owner
from oss_responses.api.errors import DATABASE_UNREACHABLE
from oss_responses.api.queued import QueuedResponse
from oss_responses.api.references import conversation_items, referenced_ids, resolve_references
from oss_responses.api.services import Services
from oss_responses.cancel_request import check_flagged, flag_commands
from oss_responses.conversation import BrokenChain, ConversationPrefix, history_of, render_options, with_prefix
from oss_responses.errors import BadRequest, NotFound, ServiceUnavailable, TooManyRequests
from oss_responses.eventlog.archive import drop_closed_stream
from oss_responses.eventlog.frames import parse_frame
from oss_responses.eventlog.losses import StreamLost, StreamNotFound
from oss_responses.eventlog.writes import EventLogOverwritten, EventWriteError, framed, write_events, write_frames
from oss_responses.harmony.history import ConversationTurn
from oss_responses.harmony.lifecycle import opening_events
from oss_responses.harmony.render import ConversationPlan, plan_conversation
from oss_responses.logs import bind
from oss_responses.metrics import ACCEPTED, response_ended
from oss_responses.relays import relay_command
from oss_responses.request_items import InputItem, duplicate_item, given_id
from oss_responses.requests import CreateResponseRequest
from oss_responses.sealing import seal_secrets
from oss_responses.statuses import TERMINAL_EVENT_TYPES
from oss_responses.storage import (
    ConversationLocked,
    InFlightLimitReached,
    ResponseRecord,
    cancel_queued,
    delete_response,
    find_input_items,
    find_referenced_items,
    get_chain,
    get_owned_response,
    get_response,
    insert_accepted,
    utcnow,
)
from oss_responses.storage.webhook_deliveries import ended_with_deliveries
from oss_responses.tools.policy import resolve_servers
from oss_responses.webhooks.events import WebhookDelivery, planned_deliveries
from oss_responses.webhooks.notify import log_rows
from oss_responses.wire import response_json

log = logging.getLogger(__name__)

# What an unreachable Redis raises: from our client, from Celery's producer (kombu), from the socket.
BROKER_ERRORS = (RedisError, OperationalError, OSError)
# ... and what a Redis refusing the opening events' writes (full under noeviction) raises: the frames'
# pipeline reports its commands' refusals so (it was a 500, the response stored and later run anyway).
ACCEPT_ERRORS = (*BROKER_ERRORS, EventWriteError)



def not_found(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id")


async def load_visible(services: Services, response_id: str, owner: Owner) -> ResponseRecord:
    """A response a client may read: stored (store=true), not deleted, and its owner's; ended if its
    terminal event was written (``caught_up``)."""
    record = await services.db.run(get_owned_response, response_id, owner.name)
    if record is None or not record.store:
        raise not_found(response_id)
    bind(model=record.model)  # this request's later log lines are about that response (its id is bound)
    if record.status == "in_progress" and await caught_up(services, response_id):
        record = await services.db.run(get_response, response_id) or record
    return record


def previous_not_found(previous_response_id: str) -> BadRequest:
    return BadRequest(f"Previous response with id '{previous_response_id}' not found.",
                      param="previous_response_id", code="previous_response_not_found")


async def load_chain(services: Services, previous_response_id: str | None, owner: Owner) -> list[ResponseRecord]:
    """The conversation a request continues: 400 ``previous_response_not_found`` if its previous response is
    unknown (or another owner's: a chain is never grafted onto someone else's turns), as OpenAI answers
    it (clients that replay the whole conversation on that 400 rely on it), and 400 if unfinished."""
    if previous_response_id is None:
        return []
    chain = await services.db.run(get_chain, previous_response_id, owner.name)
    previous = chain[-1] if chain else None
    if (previous is None or previous.id != previous_response_id or not previous.store
            or not all(owner.may_see(turn) for turn in chain)):
        raise previous_not_found(previous_response_id)
    if previous.status == "in_progress" and await caught_up(services, previous.id):
        chain = await services.db.run(get_chain, previous_response_id, owner.name) or chain
        previous = chain[-1]
    if not previous.is_terminal:
        raise BadRequest(
            f"Previous response with id '{previous_response_id}' is still {previous.status}.",
            param="previous_response_id",
        )
    return chain


# The worker writes a response's terminal event, then saves its turn, then ends its log. A client acts
# on that event at once (continues the response, retrieves it), so a reader of a response that SQL
# says is running, whose log holds its terminal event, waits this long at most for SQL to follow.
CATCH_UP_SECONDS = 5.0


async def caught_up(services: Services, response_id: str) -> bool:
    """Whether SQL, which said the response is running, may say more now (read it again): its log holds
    its terminal event, and has ended since; or its log has ended, or is gone, already: the worker saved
    the turn between the SQL read and this one (a client that read the terminal event at once got the
    running row back). Redis unreachable: no (SQL's view stands, as for any read that needs no Redis)."""
    try:
        last = await services.hub.last_event(response_id)
        if last is None:  # a running response's log holds its opening events: ended (or gone) since
            return True
        if last[1] not in TERMINAL_EVENT_TYPES:
            return False
        await asyncio.wait_for(wait_for_end(services, response_id, after=last[0]), CATCH_UP_SECONDS)
    except (TimeoutError, *BROKER_ERRORS):
        return False
    return True


# Planning costs ~5 us per message (input items and earlier turns' messages): 0.07 ms for 10, 14.5 ms
# for 1,000. A hop to a thread and back costs the loop ~0.11 ms of CPU, so a conversation this small is
# planned on the loop, and a larger one off it.
PLAN_ON_LOOP_MESSAGES = 32


async def check_conversation(
    services: Services,
    request: CreateResponseRequest,
    chain: list[ResponseRecord],
    owner: Owner,
    prefix: ConversationPrefix | None = None,
) -> ConversationPlan:
    """Everything the worker would refuse, refused now (a 400), before anything is stored."""
    history = await resolve_conversation(services, request, chain, owner, prefix)
    options = render_options(services.settings, utcnow(), sealer=services.sealer, owner=owner.name)
    if len(request.input_items()) + sum(len(turn.messages) for turn in history) <= PLAN_ON_LOOP_MESSAGES:
        return plan_conversation(request, history, options)
    return await anyio.to_thread.run_sync(plan_conversation, request, history, options)


async def resolve_conversation(
    services: Services,
    request: CreateResponseRequest,
    chain: list[ResponseRecord],
    owner: Owner,
    prefix: ConversationPrefix | None = None,
) -> list[ConversationTurn]:
    """The chain's turns (400 if it was cut) after ``prefix``'s conversation items, with the request's item
    references replaced by the items they name: the conversation's and the chain's first, then any stored
    item ``owner`` may see (clients that keep the conversation themselves, such as the Vercel AI SDK, name
    earlier output items with no ``previous_response_id``)."""
    try:
        history = history_of(chain)
    except BrokenChain as exc:
        raise BadRequest(
            f"The conversation of previous response '{request.previous_response_id}' cannot be continued: {exc}.",
            param="previous_response_id",
        ) from exc
    await check_not_in_chain(services, request.input_items(), chain, history)
    options = render_options(services.settings, utcnow(), sealer=services.sealer, owner=owner.name)
    history = with_prefix(history, prefix, options)
    references = referenced_ids(request.input_items())
    if references:
        known = conversation_items(history)
        chain_ids = [record.id for record in chain]
        known |= await services.db.run(find_referenced_items, references, chain_ids, owner.name, known.keys())
        request.input = resolve_references(request.input_items(), known)
    return history


async def check_not_in_chain(
    services: Services, items: list[InputItem], chain: list[ResponseRecord], history: list[ConversationTurn]
) -> None:
    """OpenAI's 400 for an input item, by its id, that the continued chain already holds (its turns' output
    items, their input items, under the ids the client gave or the ones they were stored under): a client
    that resends the previous response's output with ``previous_response_id`` would have the model read
    it twice. An ``item_reference`` names a stored item (the chain's included): it is resolved, not refused."""
    given = [item_id for item in items if not isinstance(item, ItemReference) and (item_id := given_id(item))]
    if not given or not chain:
        return
    held = conversation_items(history)
    repeated = next((item_id for item_id in given if item_id in held), None)
    if repeated is None:
        stored = await services.db.run(find_input_items, [record.id for record in chain], given)
        repeated = next((item_id for item_id in given if item_id in stored), None)
    if repeated is not None:
        raise duplicate_item(repeated, "input")


async def accept(services: Services, queued: QueuedResponse, owner: Owner) -> list[bytes]:
    """Check its tool servers, store (as ``owner``'s), open the event log, enqueue; the opening frames
    (the client's first events)."""
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
        response=response_json(response),
        previous_response_id=response.previous_response_id,
        # Stored now, so the turn's input stays part of the conversation even if it never runs.
        input_messages=queued.input_messages,
        function_calls=queued.function_calls,
        conversation_through=queued.conversation_through,
        conversation_id=response.conversation.id if response.conversation is not None else None,
        # Checked before: credentials come only with a sealer (api/sealed.py).
        sealed_secrets=seal_secrets(services.sealer, queued.secrets) if queued.secrets and services.sealer else None,
        owner=owner.name,
    )
    await _insert(services, record, queued.input_items, owner)
    # Framed once: the same bytes go to the log and, for a stream, straight to the client.
    opening = framed(opening_events(response))
    try:
        # Expiring until a worker claims it: should Redis fail next, the undo below may not delete it.
        await write_frames(services.redis, response.id, opening, ttl_seconds=services.settings.event_ttl_seconds,
                           also=_relayed_by(services, response))
        await services.tasks.run_response(response.id, services.settings.queue_for(response.model))
    except ACCEPT_ERRORS as exc:
        await _undo_accept(services, response.id, exc)
        raise ServiceUnavailable(
            "The service cannot queue responses right now (its Redis is unreachable or refusing writes); nothing "
            "was stored. "
            "Retry shortly.", code="queue_unavailable",
        ) from exc
    ACCEPTED.labels(response.model, str(bool(response.background)).lower()).inc()
    return [data for _, data in opening]


def _relayed_by(services: Services, response: Response) -> list[tuple[Any, ...]]:
    """A foreground response runs for its client here: this process is recorded as its relay, so that the
    workers cancel it should the process be killed (``relays.py``). A background one runs for nobody in
    particular."""
    if response.background:
        return []
    return [relay_command(response.id, services.heartbeat.instance_id, services.settings.event_ttl_seconds)]


async def _insert(services: Services, record: ResponseRecord, items: list[dict[str, Any]], owner: Owner) -> None:
    try:
        await services.db.run(insert_accepted, record, items, background_limit=owner.background_limit,
                              in_flight_limit=owner.in_flight_limit)
    except ConversationLocked as exc:
        # OpenAI's words and code for it.
        raise BadRequest(
            "Another process is currently operating on this conversation. Please retry in a few seconds.",
            param="conversation", code="conversation_locked",
        ) from exc
    except IntegrityError as exc:
        # The one foreign key an accept can miss: the previous response, deleted since it was loaded.
        previous = record.previous_response_id
        if previous is None or await services.db.run(get_response, previous) is not None:
            raise
        raise previous_not_found(previous) from exc
    except InFlightLimitReached as exc:
        retry_after = services.settings.background_limit_retry_after_seconds
        kind = "background responses" if exc.background else "responses (streamed, waited for or background)"
        raise TooManyRequests(
            f"This API key's owner already has {exc.limit} {kind} queued or in progress, the most it may have at "
            f"once; nothing was stored. Retry after {retry_after} seconds, or once one of them has ended.",
            code="too_many_background_responses" if exc.background else "too_many_responses_in_flight",
            headers={"Retry-After": str(retry_after)},
        ) from exc


async def _undo_accept(services: Services, response_id: str, cause: Exception) -> None:
    """A response that could not be queued leaves nothing behind: no row, no input items, no stream."""
    log.warning("could not queue %s (%s: %s): undoing its accept", response_id, type(cause).__name__, cause)
    await services.db.run(delete_response, response_id)
    try:
        await services.redis.delete(redis_keys.events(response_id), redis_keys.relay(response_id))
    except RedisError:
        pass  # Redis is what failed: the opening events most likely never got there


async def request_cancel(services: Services, record: ResponseRecord) -> bool:
    """Ask every worker to stop the response; cancel it here if still queued (True if this did).

    Listed among the open streams first: should the end marker not reach Redis after the cancel is
    saved, the reaper ends the stream (``workers/unclosed.py``)."""
    ttl = services.settings.event_ttl_seconds
    async with services.redis.pipeline(transaction=False) as pipe:
        for command in flag_commands(record.id, ttl):
            pipe.execute_command(*command)
        check_flagged(await pipe.execute(raise_on_error=False), record.id)
    await services.redis.publish(redis_keys.CANCEL_CHANNEL, record.id)  # once flagged: cancel_request.py
    # Its webhooks logged pending with the cancel itself (see webhooks/notify.py).
    deliveries = planned_deliveries(
        services.settings, record.id, "cancelled", background=record.background, ended_at=int(time.time())
    )
    won = await services.db.run(ended_with_deliveries, log_rows(deliveries), cancel_queued, record.id, record.response)
    if won:
        await _withdraw_task(services, record)
        await _close_cancelled(services, record.id, ttl)
        await _announce_end(services, record, "cancelled", deliveries)
    return won


async def _close_cancelled(services: Services, response_id: str, ttl: int) -> None:
    """The end marker of a response cancelled here. A stream key that holds something else (by hand, another
    application, a bug) takes none: the cancel stands (saved in SQL, the truth, its webhooks with it), the
    key's other close commands ran (its TTL, the journal's DEL, the open streams' SREM), and its readers are
    told ``event_log_lost`` and to retrieve the response. It was a 503 that told the client to retry a cancel
    already made, and skipped the webhooks' tasks."""
    try:
        await write_events(services.redis, response_id, [], close="cancelled", ttl_seconds=ttl)
    except EventLogOverwritten as exc:
        log.warning("%s cancelled without its end marker: %s; the key is left as it is", response_id, exc)


async def _withdraw_task(services: Services, record: ResponseRecord) -> None:
    """A response cancelled here, while queued: its task leaves its model's queue, which counts it no more."""
    try:
        await services.tasks.withdraw(services.settings.queue_for(record.model), record.id)
    except RedisError as exc:  # the cancel stands: the worker that takes the task skips it
        log.warning("could not take the task of cancelled %s out of its queue (%s: %s)", record.id,
                    type(exc).__name__, exc)


async def _announce_end(
    services: Services, record: ResponseRecord, status: str, deliveries: list[WebhookDelivery]
) -> None:
    """Ended here (cancelled while queued): counted, and its webhooks' tasks sent."""
    response_ended(record.model, status)
    if not deliveries:
        return
    try:
        await services.tasks.deliver_webhooks(deliveries)
    except Exception:  # the cancel stands; the deliveries stay pending in the log for the sweeper
        log.exception("queueing the webhooks of %s failed", record.id)


async def cancel_if_running(services: Services, response_id: str) -> None:
    """The client that ran a (non-background) response left: stop it."""
    record = await services.db.run(get_response, response_id)
    if record is not None and not record.is_terminal:
        await request_cancel(services, record)


async def wait_for_end(
    services: Services, response_id: str, after: int | None, *, history: bool = True
) -> dict[str, Any] | None:
    """Follow the event log to its end marker; the last event's payload (None if there was none).

    ``history=False``: the caller wrote the log up to ``after`` itself (see ``EventHub.subscribe``).
    """
    last: bytes | None = None
    try:
        async for chunk in services.hub.subscribe(response_id, after=after, history=history):
            last = chunk
    except StreamLost:
        log.warning("event stream of %s was lost; waiting for its end in SQL", response_id)
        await _wait_in_sql(services, response_id)
        return None
    except StreamNotFound:
        log.warning("event stream of %s is gone; reading the response from SQL", response_id)
    return parse_frame(last) if last else None


async def _wait_in_sql(services: Services, response_id: str, timeout: float = 120.0) -> None:
    """Until the response is ended (a worker or the reaper fails a response whose progress Redis lost)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        record = await services.db.run(get_response, response_id)
        if record is None or record.is_terminal:
            return
        await asyncio.sleep(0.5)


async def final_response(services: Services, response_id: str, last_event: dict[str, Any] | None) -> dict[str, Any]:
    """The response after its stream ended: from SQL, or from its terminal event if SQL lags or does not
    answer (a 503 would tell the client of a response that ran to retry it: it would run again)."""
    ended = last_event if last_event is not None and last_event.get("type") in TERMINAL_EVENT_TYPES else None
    try:
        record = await services.db.run(get_response, response_id)
    except DATABASE_UNREACHABLE as exc:
        if ended is None:
            raise
        log.warning("response %s ended, but the database did not answer (%s): answered from its terminal event",
                    response_id, type(exc).__name__)
        record = None
    if record is not None and record.is_terminal:
        return public_json(record)
    if ended is not None:
        return dict(ended["response"])
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
    try:
        await drop_closed_stream(services.redis, record.id)
    except RedisError:  # deleted in SQL, the truth: its stream goes at its TTL
        log.warning("dropping the event stream of deleted %s failed: it stays in Redis until its TTL", record.id,
                    exc_info=True)


def public_json(record: ResponseRecord) -> dict[str, Any]:
    """The Response JSON a client gets; with vLLM's ``enable_response_messages``, the harmony messages.

    Until it ends, the stored JSON is the snapshot taken at accept time: its status is the row's
    (a response that is not background is never shown ``queued``, as on OpenAI).
    """
    body = dict(record.response)
    if not record.is_terminal:
        body["status"] = "in_progress" if record.status == "queued" and not record.background else record.status
    if record.request.get("enable_response_messages"):
        body["input_messages"] = (record.state or {}).get("prompt_messages", record.input_messages)
        body["output_messages"] = record.output_messages
    return body


def queued_json(queued: QueuedResponse) -> dict[str, Any]:
    body = response_json(queued.response)
    if queued.request.get("enable_response_messages"):
        body |= {"input_messages": [], "output_messages": []}
    return body

