"""``item_reference`` input items, replaced by the items they name.

A reference names an item of the conversation the request continues (an input or output item of an
earlier turn, by id). It is resolved once, when the request is accepted, and the named item is what
is stored and rendered; a reference to nothing in the conversation is a 400 naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

from openai.types.responses.response_input_item import ItemReference
from pydantic import BaseModel

from oss_responses.errors import BadRequest
from oss_responses.harmony.history import ConversationTurn
from oss_responses.requests import parse_input_item


def resolve_references(items: Sequence[BaseModel], history: Sequence[ConversationTurn]) -> list[BaseModel]:
    if not any(isinstance(item, ItemReference) for item in items):
        return list(items)
    known = {item["id"]: item for turn in history for item in turn.items if item.get("id")}
    return [_resolve(item, index, known) if isinstance(item, ItemReference) else item for index, item in enumerate(items)]


def _resolve(reference: ItemReference, index: int, known: dict[str, dict]) -> BaseModel:  # type: ignore[type-arg]
    param = f"input[{index}].id"
    found = known.get(reference.id)
    if found is None:
        raise BadRequest(
            f"Item with id '{reference.id}' not found in the conversation of previous_response_id.", param=param
        )
    return parse_input_item(found, f"input[{index}]")
