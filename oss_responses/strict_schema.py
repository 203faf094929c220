"""OpenAI's checks of the JSON schemas a request hands the model, in its words.

Any schema must be one (JSON Schema 2020-12's metaschema, and an ``enum`` that offers a value): a
``properties: 5`` or ``type: "blorp"`` was accepted and the response then failed in the worker with a
Python exception as its message (``ZeroDivisionError`` for ``enum: []``), where OpenAI answers a 400.
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
from functools import cache
from typing import Any

from jsonschema import Draft7Validator, Draft202012Validator
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "prefixItems")


def schema_problem(schema: Any) -> str | None:
    """What makes ``schema`` no JSON Schema, or one that no value can satisfy by its ``enum``. Its own
    ``$schema`` says which draft; without one, 2020-12's or draft-07's (clients still write draft-07:
    ``items`` as a list, ``definitions``) will do."""
    if not isinstance(schema, dict):
        return None
    declared = validator_for(schema, default=None) if "$schema" in schema else None
    drafts = (declared,) if declared is not None else (Draft202012Validator, Draft7Validator)
    errors = [best_match(_metaschema(draft).iter_errors(schema)) for draft in drafts]
    first = errors[0]
    if first is not None and None not in errors:
        path = tuple(first.absolute_path)
        return f"In context={path[:-1]!r}, {first.message}."
    for context, node in _subschemas(schema, ()):
        if node.get("enum") == []:
            return f"In context={context!r}, 'enum' must offer at least one value."
    return None


@cache
def _metaschema(draft: Any) -> Any:
    return draft(draft.META_SCHEMA)


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
    missing = [key for key in properties if key not in listed]
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
