"""A deterministic instance of a JSON schema: what the scripted engine answers for ``json_schema``.

Covers what structured outputs use (OpenAI's strict subset and a little more): objects (every
declared property is written, so ``strict``'s all-required holds and ``additionalProperties: false``
is never broken), arrays (``minItems``, ``prefixItems``, distinct items for ``uniqueItems``), strings
(``enum``, ``const``, common ``format`` values, ``minLength``/``maxLength``), numbers and integers
(bounds, exclusive bounds, ``multipleOf``), booleans, null, ``anyOf``/``oneOf`` (the first viable
branch), ``allOf`` (merged), ``$ref`` into ``$defs``/``definitions``, and type lists (the first
non-null type). ``pattern`` is not solved: a free string there is only a guess.
"""

from __future__ import annotations

import math
from typing import Any

_FORMATS = {
    "date": "2024-01-01",
    "date-time": "2024-01-01T00:00:00Z",
    "time": "00:00:00Z",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "uri": "https://example.com/",
    "iri": "https://example.com/",
    "uri-reference": "https://example.com/",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "duration": "P1D",
}
_MAX_DEPTH = 32  # a recursive schema ($ref to itself) stops where an empty value is allowed
# Arrays get one item (the instance shows their items' shape) down to this depth, then their minItems:
# a tree (children: list[Node]) ends in empty lists instead of recursing without an end.
_SHOWN_DEPTH = 8


class UnsatisfiableSchema(ValueError):
    """No instance could be built (``false``, or only branches that are)."""


def instance_of(schema: Any, *, text: str = "") -> Any:
    """A value valid against ``schema``; free strings are built from ``text``."""
    return _Generator(schema, text or "text").value(schema, 0, 0)


class _Generator:
    def __init__(self, root: Any, text: str) -> None:
        self.root = root
        self.text = text

    def value(self, schema: Any, depth: int, ordinal: int) -> Any:
        if schema is True or schema == {}:
            return self._string({}, ordinal)
        if not isinstance(schema, dict):
            raise UnsatisfiableSchema(f"no value satisfies the schema {schema!r}")
        if depth > _MAX_DEPTH:
            raise UnsatisfiableSchema("the schema recurses without an end")
        if "$ref" in schema:
            return self.value(self._resolve(schema["$ref"]), depth + 1, ordinal)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return schema["enum"][ordinal % len(schema["enum"])]
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self._first_viable(schema, key, depth, ordinal)
        if "allOf" in schema:
            return self.value(_merged(schema), depth + 1, ordinal)
        return self._typed(schema, _type_of(schema), depth, ordinal)

    def _typed(self, schema: dict[str, Any], kind: str, depth: int, ordinal: int) -> Any:
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, depth)
        if kind in ("integer", "number"):
            return _number(schema, kind == "integer", ordinal)
        if kind == "boolean":
            return ordinal % 2 == 0
        if kind == "null":
            return None
        return self._string(schema, ordinal)

    def _first_viable(self, schema: dict[str, Any], key: str, depth: int, ordinal: int) -> Any:
        base = {k: v for k, v in schema.items() if k != key}
        for branch in schema[key]:
            try:
                merged = base | branch if isinstance(branch, dict) else branch
                return self.value(merged, depth + 1, ordinal)
            except UnsatisfiableSchema:
                continue
        raise UnsatisfiableSchema(f"no branch of {key} is satisfiable")

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties: dict[str, Any] = schema.get("properties", {})
        required = list(schema.get("required", []))
        # Optional properties too (strict needs them all), unless a size limit says otherwise.
        names = list(properties) if "maxProperties" not in schema else required
        names += [name for name in required if name not in names]
        extra = schema.get("additionalProperties", {})
        written: dict[str, Any] = {}
        for name in names:
            try:
                written[name] = self.value(properties.get(name, extra if extra is not False else {}), depth + 1, 0)
            except UnsatisfiableSchema:
                if name in required:
                    raise
                # An optional property no value fits (``false``) or that recurses without end is left out.
        return written

    def _array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems", [])
        items = schema.get("items", {})
        if isinstance(items, list):  # draft-07 tuple form
            prefix, items = items, schema.get("additionalItems", {})
        count = max(schema.get("minItems", 1 if depth < _SHOWN_DEPTH else 0), len(prefix))
        if "maxItems" in schema:
            count = min(count, schema["maxItems"])
        if items is False:
            count = min(count, len(prefix))
        return [self.value(prefix[i] if i < len(prefix) else items, depth + 1, i) for i in range(count)]

    def _string(self, schema: dict[str, Any], ordinal: int) -> str:
        value = _FORMATS.get(schema.get("format", ""))
        if value is None:
            value = self.text if ordinal == 0 else f"{self.text} {ordinal + 1}"
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if high is not None and len(value) > high:
            value = value[:high]
        if len(value) < low:
            value += "x" * (low - len(value))
        return value

    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise UnsatisfiableSchema(f"only local references are supported, not {ref!r}")
        target = self.root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            try:
                target = target[int(part)] if isinstance(target, list) else target[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise UnsatisfiableSchema(f"the reference {ref!r} points nowhere") from None
        return target


def _type_of(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        non_null = [k for k in kind if k != "null"]
        return non_null[0] if non_null else "null"
    if isinstance(kind, str):
        return kind
    if "properties" in schema or "additionalProperties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    if any(key in schema for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
        return "number"
    return "string"


def _merged(schema: dict[str, Any]) -> dict[str, Any]:
    """``allOf`` folded into one schema (properties and required lists combined)."""
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        if not isinstance(part, dict):
            continue
        properties = merged.get("properties", {}) | part.get("properties", {})
        required = list(dict.fromkeys(merged.get("required", []) + part.get("required", [])))
        merged |= part
        if properties:
            merged["properties"] = properties
        if required:
            merged["required"] = required
    return merged


def _number(schema: dict[str, Any], integer: bool, ordinal: int) -> int | float:
    low, high = _bounds(schema, integer)
    step = schema.get("multipleOf")
    value: float = low if low is not None else (high if high is not None and high < 0 else 0)
    spread = value + ordinal * (step or 1)  # distinct values for uniqueItems
    if high is None or spread <= high:
        value = spread
    if step:
        value = math.ceil(value / step) * step
        if high is not None and value > high:
            value = math.floor(high / step) * step
    if integer or float(value).is_integer():
        return int(value)
    return value


def _bounds(schema: dict[str, Any], integer: bool) -> tuple[float | None, float | None]:
    low, high = schema.get("minimum"), schema.get("maximum")
    gap = 1 if integer else 0.5
    if isinstance(schema.get("exclusiveMinimum"), (int, float)):
        low = max(low, schema["exclusiveMinimum"] + gap) if low is not None else schema["exclusiveMinimum"] + gap
    if isinstance(schema.get("exclusiveMaximum"), (int, float)):
        high = min(high, schema["exclusiveMaximum"] - gap) if high is not None else schema["exclusiveMaximum"] - gap
    if integer:
        low = math.ceil(low) if low is not None else None
        high = math.floor(high) if high is not None else None
    if low is not None and high is not None and low > high:
        if integer:
            raise UnsatisfiableSchema(f"no integer lies within [{low}, {high}]")
        low = (schema.get("exclusiveMinimum", low) + schema.get("exclusiveMaximum", high)) / 2
    return low, high
