"""``/v1/conversations``: create, retrieve, update, delete, and their items (``api/conversations.py``).

Every route acts for the owner of the request's API key (``OwnerDep``): another owner's conversation
is a 404, exactly as an unknown one.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from openai.types.responses import ResponseIncludable

from oss_responses.api import conversations
from oss_responses.api.body import read_json_body
from oss_responses.api.deps import OwnerDep, PageDep, ServicesDep
from oss_responses.api.items import item_list_json
from oss_responses.errors import NotFound
from oss_responses.storage.conversations import (
    add_items,
    delete_conversation,
    delete_item,
    get_item,
    insert_conversation,
    items_through,
    list_items,
    set_metadata,
)

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])

# ``include`` is accepted as OpenAI's list and retrieve take it; the items come back as they were stored
# (a response's items carry what its own ``include`` asked for).
Include = Annotated[list[ResponseIncludable] | None, Query(alias="include[]")]


@router.post("")
async def create_conversation(request: Request, services: ServicesDep, owner: OwnerDep) -> dict[str, Any]:
    body = conversations.parse_create(await read_json_body(request, services.settings))
    items = await conversations.conversation_items(services, body.items or [], owner)
    await conversations.check_room(services, None, items, "items")
    await conversations.check_items_usable(services, [], items, owner)
    record = conversations.new_conversation(owner, body.metadata)
    await services.db.run(insert_conversation, record, items)
    return conversations.conversation_json(record)


@router.get("/{conversation_id}")
async def retrieve_conversation(conversation_id: str, services: ServicesDep, owner: OwnerDep) -> dict[str, Any]:
    return conversations.conversation_json(await conversations.load_conversation(services, conversation_id, owner))


@router.post("/{conversation_id}")
async def update_conversation(
    conversation_id: str, request: Request, services: ServicesDep, owner: OwnerDep
) -> dict[str, Any]:
    record = await conversations.load_conversation(services, conversation_id, owner)
    body = conversations.parse_update(await read_json_body(request, services.settings))
    metadata = body.metadata or {}
    await services.db.run(set_metadata, conversation_id, metadata)
    return conversations.conversation_json(conversations.with_metadata(record, metadata))


@router.delete("/{conversation_id}")
async def remove_conversation(conversation_id: str, services: ServicesDep, owner: OwnerDep) -> dict[str, Any]:
    await conversations.load_conversation(services, conversation_id, owner)
    if not await services.db.run(delete_conversation, conversation_id):  # a concurrent DELETE took it
        raise conversations.conversation_not_found(conversation_id)
    return conversations.deleted_json(conversation_id)


@router.post("/{conversation_id}/items")
async def create_items(
    conversation_id: str, request: Request, services: ServicesDep, owner: OwnerDep, include: Include = None
) -> dict[str, Any]:
    await conversations.load_conversation(services, conversation_id, owner)
    body = conversations.parse_add(await read_json_body(request, services.settings))
    items = await conversations.conversation_items(services, body.items, owner)
    await conversations.check_room(services, conversation_id, items, "items")
    found = await services.db.run(items_through, conversation_id)
    await conversations.check_items_usable(services, found[0] if found else [], items, owner)
    await services.db.run(add_items, conversation_id, items)
    return item_list_json(items, has_more=False)


@router.get("/{conversation_id}/items")
async def list_conversation_items(
    conversation_id: str,
    services: ServicesDep,
    owner: OwnerDep,
    page: PageDep,
    include: Include = None,
) -> dict[str, Any]:
    await conversations.load_conversation(services, conversation_id, owner)
    items, has_more = await services.db.run(list_items, conversation_id, after=page.after, limit=page.limit,
                                            order=page.order)
    return item_list_json(items, has_more)


# ``:path``: a client's own item id may hold a '/', which the route otherwise did not match (its item was kept,
# listed, and answered 404 by id).
@router.get("/{conversation_id}/items/{item_id:path}")
async def retrieve_item(
    conversation_id: str, item_id: str, services: ServicesDep, owner: OwnerDep, include: Include = None
) -> dict[str, Any]:
    await conversations.load_conversation(services, conversation_id, owner)
    item = await services.db.run(get_item, conversation_id, item_id)
    if item is None:
        raise _item_not_found(conversation_id, item_id)
    return item


@router.delete("/{conversation_id}/items/{item_id:path}")
async def remove_item(conversation_id: str, item_id: str, services: ServicesDep, owner: OwnerDep) -> dict[str, Any]:
    """OpenAI answers with the conversation the item was deleted from."""
    record = await conversations.load_conversation(services, conversation_id, owner)
    if not await services.db.run(delete_item, conversation_id, item_id):
        raise _item_not_found(conversation_id, item_id)
    return conversations.conversation_json(record)


def _item_not_found(conversation_id: str, item_id: str) -> NotFound:
    return NotFound(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.", param="item_id")
