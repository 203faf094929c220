"""``/v1/responses``: create, retrieve (JSON or a replayed stream), cancel, delete, input items.

Every route acts for the owner of the request's API key (``OwnerDep``): it sees, continues and
creates that owner's responses only, and uses only the models that key may use.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, WebSocket
from fastapi.responses import JSONResponse, Response

from oss_responses.api import compaction, conversations, creating, jobs, limits, openapi, sealed, token_count
from oss_responses.api.auth import Owner, authenticate
from oss_responses.api.body import MAX_SAFE_INTEGER, read_json_body
from oss_responses.api.deps import OwnerDep, PageDep, ServicesDep
from oss_responses.api.disconnect import ClientDisconnected, unless_disconnected
from oss_responses.api.errors import error_response
from oss_responses.api.items import item_list_json
from oss_responses.api.queued import build_queued
from oss_responses.api.relay import relay
from oss_responses.api.services import Services
from oss_responses.api.socket import ResponsesSocket
from oss_responses.errors import BadRequest, NotFound, ServiceError
from oss_responses.eventlog.losses import StreamNotFound
from oss_responses.request_include import parse_include
from oss_responses.requests import CreateResponseRequest, parse_create_request
from oss_responses.storage import list_input_items

router = APIRouter(prefix="/v1/responses", tags=["responses"])

CANCEL_WAIT_SECONDS = 10.0
DISCONNECTED = 499  # nginx's "client closed request": nobody reads it, the logs do


@router.post("", openapi_extra=openapi.create_body())
async def create_response(request: Request, services: ServicesDep, owner: OwnerDep) -> Response:
    body = await read_json_body(request, services.settings,
                                then=lambda value: parse_create_request(limits.counted(services.settings, value)))
    if body.stream:
        return await _create_streamed(services, body, owner)
    accepted = await creating.create(services, body, owner)
    opening = accepted.opening
    if body.background:
        return JSONResponse(jobs.queued_json(accepted.queued))
    final = await _final_unless_disconnected(request, services, accepted.response_id, after=len(opening) - 1)
    return Response(status_code=DISCONNECTED) if final is None else JSONResponse(final)


async def _create_streamed(services: Services, body: CreateResponseRequest, owner: Owner) -> Response:
    release = services.streams.take(owner)  # before anything is stored: a refusal leaves nothing behind
    try:
        accepted = await creating.create(services, body, owner)
        opening = accepted.opening
        return await relay(services, accepted.response_id, head=opening, after=len(opening) - 1,
                           cancel_on_disconnect=not body.background, release=release)
    except BaseException:
        release()
        raise


@router.websocket("")
async def responses_socket(websocket: WebSocket, services: ServicesDep) -> None:
    """The Responses API's WebSocket mode (``api/socket.py``). A key refused is refused as over HTTP: the
    handshake is answered with the 401 and its error body."""
    try:
        owner = await authenticate(services.settings, services.db, websocket.headers.get("authorization"))
        release = services.streams.take(owner)  # the connection's, for as long as it is open
    except ServiceError as exc:
        await websocket.send_denial_response(error_response(exc))
        return
    try:
        await ResponsesSocket(websocket, services).serve()
    finally:
        release()


async def _final_unless_disconnected(
    request: Request, services: Services, response_id: str, after: int
) -> dict[str, Any] | None:
    """The response once ended; None (and the response cancelled) if the client left first.

    Its callers have just accepted it: the log holds exactly their opening events, up to ``after``.
    """
    try:
        last = await unless_disconnected(request, jobs.wait_for_end(services, response_id, after=after, history=False))
    except ClientDisconnected:
        await jobs.cancel_if_running(services, response_id)
        return None
    return await jobs.final_response(services, response_id, last)


@router.post("/compact", openapi_extra=openapi.subset_body(compaction.COMPACT_FIELDS, "CompactRequest"))
async def compact_conversation(request: Request, services: ServicesDep, owner: OwnerDep) -> Response:
    """Summarise the conversation into a sealed compaction item (see ``api/compaction.py``)."""
    body = await read_json_body(
        request, services.settings,
        then=lambda value: compaction.parse_compact_request(limits.counted(services.settings, value)))
    creating.check_model(services, body.model, owner)
    limits.check_request_limits(services.settings, body)
    await limits.check_queue_depth(services, body.model)
    sealer = compaction.require_sealer(services.sealer)
    chain = await jobs.load_chain(services, body.previous_response_id, owner)
    summarising = compaction.summarising_request(body)
    prefix = await conversations.conversation_prefix(services, summarising, chain, owner)
    plan = await jobs.check_conversation(services, summarising, chain, owner, prefix)
    queued = build_queued(summarising, services.settings, plan)
    opening = await jobs.accept(services, queued, owner)  # the summarising response is the owner's too
    final = await _final_unless_disconnected(request, services, queued.response.id, after=len(opening) - 1)
    if final is None:
        return Response(status_code=DISCONNECTED)
    return JSONResponse(compaction.compacted(final, compaction.user_messages(chain, body, prefix), sealer,
                                             owner.name))


@router.post(
    "/input_tokens", openapi_extra=openapi.subset_body(token_count.COUNT_FIELDS, "InputTokensRequest")
)
async def count_input_tokens(request: Request, services: ServicesDep, owner: OwnerDep) -> JSONResponse:
    default_model = (owner.usable(services.settings.models) or services.settings.models)[0]
    body = await read_json_body(request, services.settings,
                                then=lambda value: token_count.parse_count_request(
                                    limits.counted(services.settings, value), default_model))
    creating.check_model(services, body.model, owner)
    limits.check_request_limits(services.settings, body)
    chain = await jobs.load_chain(services, body.previous_response_id, owner)
    prefix = await conversations.conversation_prefix(services, body, chain, owner)
    history = await jobs.resolve_conversation(services, body, chain, owner, prefix)
    return JSONResponse(await token_count.count_input_tokens(services, body, history, owner))


@router.get("/{response_id}")
async def retrieve_response(
    response_id: str,
    services: ServicesDep,
    owner: OwnerDep,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=-1, le=MAX_SAFE_INTEGER)] = None,
    include_listed: Annotated[list[str] | None, Query(alias="include[]")] = None,
    include: Annotated[list[str] | None, Query()] = None,
) -> Response:
    """``include`` as the SDK sends it (``include[]=``, repeated) or plain (``include=``), checked as a
    create's is and applied to the JSON (``sealed.with_included``). A stream (``stream=true``) replays the
    events a live client got, as they were written: ``include`` is checked, and changes none of them."""
    included = parse_include([*(include_listed or ()), *(include or ())])
    sealed.check_included(included, services.sealer)
    record = await jobs.load_visible(services, response_id, owner)
    if not stream:
        return JSONResponse(sealed.with_included(jobs.public_json(record), record, included, services.sealer))
    release = services.streams.take(owner)
    try:
        return await relay(services, response_id, after=starting_after, release=release)
    except StreamNotFound as exc:
        release()
        raise NotFound(f"The event stream of response '{response_id}' has expired; retrieve it without stream.",
                       param="stream") from exc
    except BaseException:
        release()
        raise


@router.post("/{response_id}/cancel")
async def cancel_response(response_id: str, services: ServicesDep, owner: OwnerDep) -> JSONResponse:
    record = await jobs.load_visible(services, response_id, owner)
    if not record.background:
        raise BadRequest("Only responses created with background=true can be cancelled.", param="response_id")
    if record.status == "cancelled":  # cancelling twice answers as the first time did
        return JSONResponse(jobs.public_json(record))
    if record.is_terminal:  # OpenAI's answer, e.g. "Cannot cancel a completed response."
        article = "an" if record.status[0] in "aeiou" else "a"
        raise BadRequest(f"Cannot cancel {article} {record.status} response.")
    if await jobs.request_cancel(services, record):
        return JSONResponse(jobs.public_json(await jobs.load_visible(services, response_id, owner)))
    # A worker holds it: the response is cancelled once the worker confirms by ending the stream.
    return JSONResponse(await jobs.wait_and_read(services, response_id, after=None, timeout=CANCEL_WAIT_SECONDS))


@router.delete("/{response_id}")
async def delete_response(response_id: str, services: ServicesDep, owner: OwnerDep) -> dict[str, Any]:
    record = await jobs.load_visible(services, response_id, owner)
    await jobs.remove(services, record)
    return {"id": response_id, "object": "response", "deleted": True}


@router.get("/{response_id}/input_items")
async def list_response_input_items(
    response_id: str,
    services: ServicesDep,
    owner: OwnerDep,
    page: PageDep,
) -> dict[str, Any]:
    await jobs.load_visible(services, response_id, owner)
    items, has_more = await services.db.run(list_input_items, response_id, after=page.after, limit=page.limit,
                                            order=page.order)
    return item_list_json(items, has_more)

