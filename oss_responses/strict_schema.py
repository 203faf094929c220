"""OpenAI's checks of the JSON schemas a request hands the model, in its words.

Any schema must be one first (``schema_shape.py``).
A function's ``parameters`` must describe an object. A *strict* schema (``text.format`` of type
``json_schema`` with ``strict: true``, a function with ``strict: true``) must also be in the subset
Structured Outputs serve: every object closed (``additionalProperties: false``) and every one of its
properties required. OpenAI refuses others at create ("Invalid schema for response_format 'x': In
context=(), 'additionalProperties' is required to be supplied and to be false."); served here they
would be accepted and then constrained to something else than the client's own validation expects.
Keywords beyond those two rules are left to the engine (the live API, probed one change at a time by
its users, enforces these two and accepts ``title`` or ``default``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "prefixItems")


def object_root_problem(schema: Any) -> str | None:
    """What is wrong with a root that is not an object schema (``{}`` stands for no parameters)."""
    if not isinstance(schema, dict) or not schema or schema.get("type") == "object":
        return None
    return f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{schema.get('type')}\"'."


def strict_problem(schema: Any) -> str | None:
    """The first object of ``schema`` that the strict subset refuses, as OpenAI words it."""
    for context, node in _subschemas(schema, ()):
        problem = _object_problem(node)
        if problem is not None:
            return f"In context={context!r}, {problem}"
    return None


def _object_problem(node: dict[str, Any]) -> str | None:
    types = node.get("type")
    if not (types == "object" or (isinstance(types, list) and "object" in types) or "properties" in node):
        return None
    if node.get("additionalProperties") is not False:
        return "'additionalProperties' is required to be supplied and to be false."
    properties = node.get("properties") or {}
    required = node.get("required")
    if not properties and required is None:
        return None
    listed = required if isinstance(required, list) else []
    named = set(listed)  # a list: 40,000 properties took 12 s on the API's event loop
    missing = [key for key in properties if key not in named]
    if not isinstance(required, list) or missing:
        detail = f" Missing '{missing[0]}'." if missing else ""
        return f"'required' is required to be supplied and to be an array including every key in properties.{detail}"
    extra = [key for key in listed if key not in properties]
    return f"Extra required key '{extra[0]}' supplied." if extra else None


def _subschemas(node: Any, context: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any]]]:
    """``node`` and every schema inside it, each with its path (OpenAI's ``context``)."""
    if not isinstance(node, dict):
        return
    yield context, node
    for key in _SUBSCHEMA_MAPS:
        children = node.get(key)
        if isinstance(children, dict):
            for name, child in children.items():
                yield from _subschemas(child, (*context, key, name))
    for key in _SUBSCHEMA_LISTS:
        children = node.get(key)
        if isinstance(children, list):
            for index, child in enumerate(children):
                yield from _subschemas(child, (*context, key, index))
    if isinstance(node.get("items"), dict):
        yield from _subschemas(node["items"], (*context, "items"))
