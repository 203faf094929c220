"""The Conversations API's requests and objects (``/v1/conversations``, routes in ``routes/conversations.py``).

A conversation is an owner's ordered list of items. Items arrive as Responses input items (at most 20
a request, as OpenAI allows) and are kept as the items its list endpoint returns: each with an id (the
client's, else a new one) and a status, whatever shorthand the client used (``api/items.py``). An
``item_reference`` is replaced by the stored item it names, among the items its owner may see.
Clients such as the Agents SDK's ``OpenAIConversationsSession`` keep a run's history here and send it
back as the next run's input.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Annotated, Any

from openai.types.conversations import Conversation, ConversationDeletedResource
from openai.types.responses.response_input_item import ItemReference
from pydantic import BaseModel, BeforeValidator, ConfigDict, TypeAdapter

from oss_responses.api.auth import Owner
from oss_responses.api.items import stored_item
from oss_responses.api.services import Services
from oss_responses.conversation import ConversationPrefix, prefix_position, render_options
from oss_responses.errors import BadRequest, NotFound
from oss_responses.harmony.ids import new_id
from oss_responses.harmony.input_items import UnknownCallId
from oss_responses.harmony.token_cost import check_tokenizable, cost_of
from oss_responses.request_items import parse_input_item
from oss_responses.requests import CreateResponseRequest, Metadata, parse_body
from oss_responses.storage import ResponseRecord, find_stored_items, utcnow
from oss_responses.storage.conversations import ConversationRecord, get_conversation, item_bytes, items_through

MAX_ITEMS_PER_REQUEST = 20  # OpenAI's limit on items added by one request

def _items(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise BadRequest("Invalid type for 'items': expected an array of items.", param="items")
    if len(value) > MAX_ITEMS_PER_REQUEST:
        raise BadRequest(f"Invalid 'items': at most {MAX_ITEMS_PER_REQUEST} items can be added at a time, "
                         f"got {len(value)}.", param="items", code="array_above_max_length")
    return value


# The raw items, at most 20 (each is checked as an input item by ``conversation_items``).
Items = Annotated[list[Any], BeforeValidator(_items)]


class CreateConversationRequest(BaseModel):
    """``POST /v1/conversations``."""

    model_config = ConfigDict(extra="forbid", strict=True)
    items: Items | None = None
    metadata: Metadata | None = None
    safety_identifier: str | None = None  # openai's create takes it (abuse monitoring): accepted, not kept


class UpdateConversationRequest(BaseModel):
    """``POST /v1/conversations/{id}``: only its metadata changes (null, as openai's SDK may send it: none)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    metadata: Metadata | None


class AddItemsRequest(BaseModel):
    """``POST /v1/conversations/{id}/items``."""

    model_config = ConfigDict(extra="forbid", strict=True)
    items: Items


_create = TypeAdapter(CreateConversationRequest)
_update = TypeAdapter(UpdateConversationRequest)
_add = TypeAdapter(AddItemsRequest)


def parse_create(body: Any) -> CreateConversationRequest:
    return parse_body(_create, body)


def parse_update(body: Any) -> UpdateConversationRequest:
    return parse_body(_update, body)


def parse_add(body: Any) -> AddItemsRequest:
    return parse_body(_add, body)


async def conversation_items(services: Services, raw: list[Any], owner: Owner) -> list[dict[str, Any]]:
    """The items to keep for ``raw``, each checked as a Responses input item (a 400 names the item),
    with an id, references replaced."""
    parsed = [parse_input_item(item, f"items[{n}]") for n, item in enumerate(raw)]
    references = [item.id for item in parsed if isinstance(item, ItemReference)]
    found = await services.db.run(find_stored_items, references, owner.name) if references else {}
    items = []
    for n, item in enumerate(parsed):
        if isinstance(item, ItemReference):
            if item.id not in found:
                raise BadRequest(f"Item with id '{item.id}' not found.", param=f"items[{n}].id")
            items.append(found[item.id])
            continue
        items.append(stored_item(item))
    return items


async def check_room(
    services: Services, conversation_id: str | None, added: list[dict[str, Any]] | int, param: str
) -> None:
    """A 400 if the conversation holds ``max_conversation_bytes`` with what is ``added`` (items, or their
    bytes): one owner grew a conversation to 280 MB, 20 items at a time, and one count of its tokens then
    held 3.5 GB of the API. What a response adds past it (its output) joins whole: the bound is loose by one turn."""
    limit = services.settings.max_conversation_bytes
    adding = added if isinstance(added, int) else sum(len(json.dumps(item, separators=(",", ":"))) for item in added)
    held = 0 if conversation_id is None else await services.db.run(item_bytes, conversation_id)
    if held + adding > limit:
        raise BadRequest(
            f"The conversation cannot take these items: it holds {held} bytes of items and they add {adding}; "
            f"this service keeps at most {limit} (OSS_RESPONSES_MAX_CONVERSATION_BYTES). Start a new "
            "conversation, or compact this one.", param=param, code="conversation_too_large",
        )


async def check_items_usable(
    services: Services, existing: list[dict[str, Any]], added: list[dict[str, Any]], owner: Owner
) -> None:
    """Refuse items that would make every later response of the conversation a 400: each is given to the
    model after those before it, as a response's worker would (an output for a call the conversation
    does not hold, sealed content this server cannot open, a run of text too long to tokenize). A
    problem already in ``existing`` (an item deleted since) is not the new items' and does not refuse
    them."""
    try:
        check_tokenizable(cost_of(added))
    except BadRequest as exc:
        raise BadRequest(exc.message, param="items", code=exc.code) from exc
    options = render_options(services.settings, utcnow(), sealer=services.sealer, owner=owner.name)
    try:
        ConversationPrefix("", -1, existing + added).turn(options)
    except BadRequest as exc:
        try:
            ConversationPrefix("", -1, existing).turn(options)
        except BadRequest:
            return
        raise _added_item_error(exc, len(existing)) from exc


def _added_item_error(exc: BadRequest, existing: int) -> BadRequest:
    """The error of ``ConversationPrefix.turn``, its item counted among the added ones."""
    cause = exc.__cause__ if isinstance(exc.__cause__, BadRequest) else exc
    # An unknown call_id names the whole input as OpenAI's does; the item it stands in is kept beside it.
    param = cause.item_param if isinstance(cause, UnknownCallId) else cause.param
    found = re.match(r"(?:conversation\.items|input)\[(\d+)\](\S*)", param or "")
    where = f"items[{int(found[1]) - existing}]{found[2]}" if found and int(found[1]) >= existing else "items"
    return BadRequest(f"Invalid value for '{where}': the model could not be given this item: {cause.message}",
                      param=where, code=cause.code)


async def load_conversation(
    services: Services, conversation_id: str, owner: Owner, param: str = "conversation_id"
) -> ConversationRecord:
    """The conversation, if ``owner`` may see it; another owner's is reported exactly as an unknown one."""
    record = await services.db.run(get_conversation, conversation_id, owner.name)
    if record is None:
        raise conversation_not_found(conversation_id, param)
    return record


def conversation_not_found(conversation_id: str, param: str = "conversation_id") -> NotFound:
    return NotFound(f"Conversation with id '{conversation_id}' not found.", param=param)


async def conversation_prefix(
    services: Services, request: CreateResponseRequest, chain: list[ResponseRecord], owner: Owner
) -> ConversationPrefix | None:
    """The conversation items that come before the request's input (OpenAI's "prepended to input_items"):
    all that its ``conversation`` holds now (the response records how far that was), or, for a chain
    that began in a conversation, as far as its first response saw it. The request's own items join the
    conversation once it ended (``save_turn``)."""
    if request.conversation is not None:
        await load_conversation(services, request.conversation, owner, param="conversation")
        found = await services.db.run(items_through, request.conversation)
        if found is None:  # deleted since it was looked up
            raise NotFound(f"Conversation with id '{request.conversation}' not found.", param="conversation")
        return ConversationPrefix(request.conversation, found[1], found[0])
    position = prefix_position(chain)
    if position is None:
        return None
    found = await services.db.run(items_through, *position)
    if found is None:
        raise BadRequest(
            f"The conversation of previous response '{request.previous_response_id}' cannot be continued: "
            f"conversation '{position[0]}', where it began, was deleted.",
            param="previous_response_id",
        )
    return ConversationPrefix(position[0], position[1], found[0])


def new_conversation(owner: Owner, metadata: dict[str, str] | None) -> ConversationRecord:
    return ConversationRecord(id=new_id("conv"), owner=owner.name, metadata=metadata or {})


def with_metadata(record: ConversationRecord, metadata: dict[str, str]) -> ConversationRecord:
    return dataclasses.replace(record, metadata=metadata)


def conversation_json(record: ConversationRecord) -> dict[str, Any]:
    return Conversation(id=record.id, object="conversation", metadata=record.metadata,
                        created_at=int(record.created_at.timestamp())).model_dump(mode="json")


def deleted_json(conversation_id: str) -> dict[str, Any]:
    return ConversationDeletedResource(id=conversation_id, object="conversation.deleted", deleted=True).model_dump()
