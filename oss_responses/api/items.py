"""A request's input, as the stored input items that ``GET /v1/responses/{id}/input_items`` returns.

Each item gets an id (OpenAI's list endpoint always has one) and a status; messages take the shape
of OpenAI's input message item (user/system/developer) or output message (assistant), whatever
shorthand the request used (``"input": "hi"``, ``{"role": "user", "content": "hi"}``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openai.types.responses import (
    EasyInputMessage,
    ResponseInputMessageItem,
    ResponseItem,
    ResponseOutputMessage,
)
from openai.types.responses.response_input_item import ItemReference, Message
from pydantic import BaseModel, TypeAdapter

from oss_responses.harmony.ids import new_id
from oss_responses.request_items import given_id
from oss_responses.wire import wire_json

_response_item = TypeAdapter(ResponseItem)

# Id prefixes of items the request may send without an id.
_ID_PREFIXES = {
    "function_call": "fc",
    "function_call_output": "fco",
    "mcp_approval_response": "mcpr",
}


def _text_parts(content: str | list[Any], part_type: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        content = [{"type": part_type, "text": content}]
    parts = [wire_json(part, exclude_none=True) if isinstance(part, BaseModel) else part for part in content]
    if part_type == "output_text":
        return [{"type": "output_text", "text": p.get("text", ""), "annotations": []} for p in parts]
    return parts


def _message_item(item: EasyInputMessage | Message) -> BaseModel:
    # The client's own id kept (a message listed from a conversation, sent back): it names the same item.
    item_id = given_id(item) or new_id("msg")
    if item.role == "assistant":
        return ResponseOutputMessage(
            id=item_id,
            type="message",
            role="assistant",
            status="completed",
            content=_text_parts(item.content, "output_text"),
        )
    return ResponseInputMessageItem(
        id=item_id,
        type="message",
        role=item.role,
        status="completed",
        content=_text_parts(item.content, "input_text"),
    )


def _other_item(item: BaseModel) -> BaseModel | dict[str, Any]:
    data = wire_json(item, exclude_none=True)
    item_type = data["type"]
    if not data.get("id"):
        data["id"] = new_id(_ID_PREFIXES.get(item_type, "item"))
    if item_type in ("function_call", "function_call_output"):
        data.setdefault("status", "completed")
    if item_type == "function_call_output" and isinstance(data.get("output"), list):
        # The stored item's image part requires the detail the request's may leave out (OpenAI's default).
        data["output"] = [{"detail": "auto"} | part if part.get("type") == "input_image" else part
                          for part in data["output"]]
    return _response_item.validate_python(data)


def stored_item(item: BaseModel) -> dict[str, Any]:
    """One parsed request input item → the JSON of the item as the list endpoint returns it."""
    if isinstance(item, (EasyInputMessage, Message)):
        stored: BaseModel | dict[str, Any] = _message_item(item)
    elif isinstance(item, ItemReference):
        # A reference names an item of an earlier response; it is kept as the reference itself.
        stored = wire_json(item, exclude_none=True)
    else:
        stored = _other_item(item)
    if isinstance(stored, BaseModel):
        return wire_json(stored, exclude_none=True)
    return stored


def stored_items(items: Sequence[BaseModel]) -> list[dict[str, Any]]:
    return [stored_item(item) for item in items]


def item_list_json(items: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """A page of items as OpenAI's list endpoints return it (a response's input items, a conversation's)."""
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": has_more,
    }
