"""Is a request's JSON schema a schema at all: the keywords engines read, of the right shape.

``properties: 5``, ``type: "blorp"`` or ``enum: []`` were accepted and the response then failed in the
worker with a Python exception as its message (``ZeroDivisionError``); OpenAI answers a 400 at create,
in jsonschema's words ("In context=('properties', 'a'), 'strin' is not valid under any of the given
schemas."). The metaschema itself (the ``jsonschema`` package) took ~350 us per property, on the API's
event loop: a 1.5 MB schema froze the API for every tenant. This is one linear pass over the keywords
that carry subschemas or constrain values, as JSON Schema 2020-12 and draft-07 both shape them
(``items`` a schema or a list of them, ``definitions`` or ``$defs``); other keywords are anyone's.
"""

from __future__ import annotations

from typing import Any

_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SCHEMA_ONES = ("additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
                "additionalItems", "unevaluatedProperties", "unevaluatedItems")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
           "minContains", "maxContains")

Context = tuple[str | int, ...]


def schema_problem(schema: Any) -> str | None:
    """The first thing that makes ``schema`` no JSON Schema, as OpenAI (jsonschema) words it; None if none."""
    if not isinstance(schema, dict):
        return None
    pending: list[tuple[Context, Any]] = [((), schema)]
    while pending:
        context, node = pending.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):  # jsonschema names the keyword holding it, not the subschema
            return f"In context={context[:-1]!r}, {node!r} is not of type 'object', 'boolean'."
        problem = _keyword_problem(node)
        if problem is not None:
            return f"In context={context!r}, {problem}"
        pending.extend(_children(node, context))
    return None


def _keyword_problem(node: dict[str, Any]) -> str | None:
    types = node.get("type")
    if types is not None:
        for value in types if isinstance(types, list) else [types]:
            if not isinstance(value, str) or value not in _TYPES:
                return f"{value!r} is not valid under any of the given schemas."
    for keyword in ("required", "enum"):
        value = node.get(keyword)
        if value is not None and not isinstance(value, list):
            return f"{value!r} is not of type 'array'."
    if node.get("enum") == []:
        return "'enum' must offer at least one value."
    required = node.get("required") or []
    if not all(isinstance(name, str) for name in required):
        return f"{required!r}: every item must be of type 'string'."
    for keyword in _COUNTS:
        value = node.get(keyword)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            return f"{value!r} is not a non-negative integer ('{keyword}')."
    multiple = node.get("multipleOf")
    if multiple is not None and (isinstance(multiple, bool) or not isinstance(multiple, int | float) or multiple <= 0):
        return f"{multiple!r} is not a number above 0 ('multipleOf')."
    pattern = node.get("pattern")
    if pattern is not None and not isinstance(pattern, str):
        return f"{pattern!r} is not of type 'string'."
    for keyword in (*_SCHEMA_MAPS, *_SCHEMA_LISTS):
        value = node.get(keyword)
        expected = dict if keyword in _SCHEMA_MAPS else list
        if value is not None and not isinstance(value, expected):
            return f"{value!r} is not of type '{'object' if expected is dict else 'array'}'."
        if keyword in _SCHEMA_LISTS and value == []:
            return "[] should be non-empty."
    return None


def _children(node: dict[str, Any], context: Context) -> list[tuple[Context, Any]]:
    children: list[tuple[Context, Any]] = []
    for keyword in _SCHEMA_MAPS:
        for name, child in (node.get(keyword) or {}).items():
            children.append(((*context, keyword, name), child))
    for keyword in _SCHEMA_LISTS:
        for index, child in enumerate(node.get(keyword) or []):
            children.append(((*context, keyword, index), child))
    for keyword in _SCHEMA_ONES:
        if keyword in node:
            children.append(((*context, keyword), node[keyword]))
    items = node.get("items")
    if isinstance(items, list):  # draft-07's tuple form
        children.extend(((*context, "items", index), child) for index, child in enumerate(items))
    elif items is not None:
        children.append(((*context, "items"), items))
    return children
