"""``item_reference`` input items, replaced by the items they name.

A reference names a stored item by id: one of the conversation the request continues (an input item or
an output item of an earlier turn), or of any other stored response its owner may see. It is resolved
once, when the request is accepted, and the named item is what is stored and rendered; a reference to
nothing is a 400 naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openai.types.responses.response_input_item import ItemReference

from oss_responses.errors import BadRequest
from oss_responses.harmony.history import ConversationTurn
from oss_responses.request_items import InputItem, parse_input_item


def referenced_ids(items: Sequence[InputItem]) -> list[str]:
    return [item.id for item in items if isinstance(item, ItemReference)]


def conversation_items(history: Sequence[ConversationTurn]) -> dict[str, dict[str, Any]]:
    """The earlier turns' items that carry an id (their output items; request input rarely has ids)."""
    return {item["id"]: item for turn in history for item in turn.items if item.get("id")}


def resolve_references(items: Sequence[InputItem], known: Mapping[str, dict[str, Any]]) -> list[InputItem]:
    return [
        _resolve(item, index, known) if isinstance(item, ItemReference) else item for index, item in enumerate(items)
    ]


def _resolve(reference: ItemReference, index: int, known: Mapping[str, dict[str, Any]]) -> InputItem:
    found = known.get(reference.id)
    if found is None:
        raise BadRequest(
            f"Item with id '{reference.id}' not found.",
            param=f"input[{index}].id",
        )
    return parse_input_item(found, f"input[{index}]")
