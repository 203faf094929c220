"""openai models as JSON, spelled as on the wire: the one way to dump them for storage and clients.

openai's types rename Python-reserved or shadowing fields (``schema_`` is ``schema``, ``async_`` is
``async``); a dump without ``by_alias`` writes the Python names, which the same types then refuse
to load (a stored json_schema Response could not be read back). And ``Response`` types
``created_at``/``completed_at`` as floats, so a plain dump says ``1762333234.0`` where OpenAI sends
integers that strict clients insist on; a usage detail it leaves unset would be a null where strict
clients want a number or nothing. Everything stored or sent goes through here so that no dump can
forget any of these.
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


def on_the_wire(response: dict[str, Any]) -> dict[str, Any]:
    """The same Response JSON as OpenAI spells it (in place, and returned): whole-second timestamps,
    and usage details that hold only counts."""
    for key in TIMESTAMPS:
        value = response.get(key)
        if isinstance(value, float):
            response[key] = int(value)
    usage = response.get("usage")
    if isinstance(usage, dict):
        _counts_only(usage)
    for item in response.get("output") or ():
        item_on_the_wire(item)
    return response


def item_on_the_wire(item: dict[str, Any]) -> dict[str, Any]:
    """The same output item JSON (in place, and returned) without what OpenAI leaves out: an
    ``mcp_list_tools`` item's ``error`` and its tools' ``description``/``annotations`` when they have no
    value (the Vercel AI SDK refuses those nulls, where it accepts them where OpenAI sends null, such as
    an ``mcp_call``'s ``error``); a reasoning item's ``status`` unless it was cut short, and its
    ``encrypted_content`` unless asked for (OpenAI's reasoning items carry neither: LangChain's v0 output
    joins two reasoning items' statuses into "in_progressin_progress" and sends that back)."""
    kind = item.get("type")
    if kind == "mcp_list_tools":
        _drop_nones(item, ("error",))
        for tool in item.get("tools") or ():
            _drop_nones(tool, ("description", "annotations"))
    elif kind == "reasoning":
        _drop_nones(item, ("encrypted_content", "status"))
        if item.get("status") in ("in_progress", "completed"):
            del item["status"]
    return item


def _drop_nones(data: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        if key in data and data[key] is None:
            del data[key]


def _counts_only(usage: dict[str, Any]) -> None:
    # A detail the type leaves unset (openai's newer ``cache_write_tokens_details``) is absent on the
    # wire, not null: the Agents SDK for JS checks every detail is a number, and a null failed each
    # of its streamed runs.
    for key in ("input_tokens_details", "output_tokens_details"):
        details = usage.get(key)
        if isinstance(details, dict):
            usage[key] = {name: value for name, value in details.items() if value is not None}


@functools.cache
def _carried(event_class: type[BaseModel]) -> str | None:
    """The field of an event class that needs spelling as on the wire: its Response or output item."""
    fields = event_class.model_fields
    return "response" if "response" in fields else "item" if "item" in fields else None


def response_json(response: BaseModel) -> dict[str, Any]:
    return on_the_wire(wire_json(response))


def event_json(event: BaseModel) -> str:
    """An event's JSON; a response-level event's Response in its wire form."""
    # Once per streamed token: a dict lookup by class (pydantic's model_fields is a property that
    # costs several calls; asking the instance costs a raised AttributeError).
    carried = _carried(type(event))
    if carried is None:
        return event.model_dump_json(by_alias=True)
    data = wire_json(event)  # once per response-level event or item, not per token
    (on_the_wire if carried == "response" else item_on_the_wire)(data[carried])
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
