"""openai models as JSON, spelled as on the wire: the one way to dump them for storage and clients.

openai's types rename Python-reserved or shadowing fields (``schema_`` is ``schema``, ``async_`` is
``async``); a dump without ``by_alias`` writes the Python names, which the same types then refuse
to load (a stored json_schema Response could not be read back). And ``Response`` types
``created_at``/``completed_at`` as floats, so a plain dump says ``1762333234.0`` where OpenAI sends
integers that strict clients insist on. Everything stored or sent goes through here so that no dump
can forget either.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel

TIMESTAMPS = ("created_at", "completed_at")


def wire_json(model: BaseModel, *, exclude_none: bool = False) -> dict[str, Any]:
    """The model's JSON-compatible dict under its wire field names."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=exclude_none)


def whole_seconds(response: dict[str, Any]) -> dict[str, Any]:
    """The same Response JSON with its timestamps as integers (in place, and returned)."""
    for key in TIMESTAMPS:
        value = response.get(key)
        if isinstance(value, float):
            response[key] = int(value)
    return response


@functools.cache
def _carries_response(event_class: type[BaseModel]) -> bool:
    return "response" in event_class.model_fields


def response_json(response: BaseModel) -> dict[str, Any]:
    return whole_seconds(wire_json(response))


def event_json(event: BaseModel) -> str:
    """An event's JSON; a response-level event's Response in its wire form."""
    # Once per streamed token: a dict lookup by class (pydantic's model_fields is a property that
    # costs several calls; asking the instance costs a raised AttributeError).
    if not _carries_response(type(event)):
        return event.model_dump_json(by_alias=True)
    data = wire_json(event)
    whole_seconds(data["response"])
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
