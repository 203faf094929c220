"""The scripted engine's JSON-schema instances: each schema feature, checked by a real validator."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from oss_responses.engine.json_instance import UnsatisfiableSchema, instance_of

SCHEMAS: dict[str, dict[str, Any]] = {
    "strict_object": {
        "type": "object", "additionalProperties": False, "required": ["name", "age"],
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    },
    "optional_property": {"type": "object", "properties": {"a": {"type": "string"}}, "required": []},
    "array_min_items_unique": {
        "type": "array", "items": {"type": "integer", "minimum": 3}, "minItems": 3, "uniqueItems": True,
    },
    "array_of_enum_unique": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 2, "uniqueItems": True},
    "string_enum": {"type": "string", "enum": ["red", "green"]},
    "const": {"const": {"kind": "fixed"}},
    "string_lengths": {"type": "string", "minLength": 40, "maxLength": 50},
    "short_string": {"type": "string", "maxLength": 2},
    "formats": {
        "type": "object",
        "properties": {f: {"type": "string", "format": f} for f in ("date", "date-time", "email", "uri", "uuid")},
        "required": ["date", "date-time", "email", "uri", "uuid"],
    },
    "number_bounds": {"type": "number", "exclusiveMinimum": 1.5, "maximum": 1.75},
    "integer_multiple": {"type": "integer", "minimum": 7, "maximum": 20, "multipleOf": 5},
    "negative_maximum": {"type": "integer", "maximum": -4},
    "boolean_and_null": {"type": "object", "properties": {"b": {"type": "boolean"}, "n": {"type": "null"}},
                         "required": ["b", "n"]},
    "nullable_string": {"type": ["string", "null"], "minLength": 2},
    "any_of_first_viable": {"anyOf": [False, {"type": "integer", "minimum": 10}]},
    "one_of": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "all_of": {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                         {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]},
    "defs_ref": {
        "type": "object", "properties": {"step": {"$ref": "#/$defs/step"}}, "required": ["step"],
        "$defs": {"step": {"type": "object", "properties": {"explanation": {"type": "string"}},
                           "required": ["explanation"], "additionalProperties": False}},
    },
    "definitions_ref": {"type": "array", "items": {"$ref": "#/definitions/n"},
                        "definitions": {"n": {"type": "number"}}},
    "recursive_ref": {
        "$ref": "#/$defs/node",
        "$defs": {"node": {"type": "object", "properties": {
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "minItems": 0}}}},
    },
    "tuple": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": False},
    "empty": {},
}


@pytest.mark.parametrize("name", SCHEMAS)
def test_instance_of_schema_validates(name: str) -> None:
    schema = SCHEMAS[name]
    jsonschema.validate(instance_of(schema, text="hello"), schema, format_checker=jsonschema.FormatChecker())


def test_instance_of_schema_uses_text_for_free_strings() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert instance_of(schema, text="what time") == {"q": "what time"}


def test_instance_of_schema_is_deterministic() -> None:
    schema = SCHEMAS["formats"] | {"properties": SCHEMAS["formats"]["properties"] | {"x": {"type": "number"}}}
    assert instance_of(schema, text="t") == instance_of(schema, text="t")


def test_instance_of_schema_refuses_unsatisfiable_schema() -> None:
    with pytest.raises(UnsatisfiableSchema):
        instance_of({"anyOf": [False, {"type": "integer", "minimum": 3, "maximum": 2}]})


def test_instance_of_recursive_tree_ends_in_empty_lists() -> None:
    # responses.parse(text_format=Node) with children: list[Node]: the tree must end somewhere.
    node = {"type": "object", "additionalProperties": False, "required": ["name", "children"],
            "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}}}
    tree = instance_of(node, text="leaf")
    jsonschema.validate(tree, node)
    depth = 0
    while tree["children"]:
        tree, depth = tree["children"][0], depth + 1
    assert tree == {"name": "leaf", "children": []} and depth > 0


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "string"}, "b": False}},
    {"type": "object", "properties": {"name": {"type": "string"}, "child": {"$ref": "#"}}},
])
def test_instance_leaves_out_optional_property_no_value_fits(schema: dict) -> None:  # type: ignore[type-arg]
    """The response failed with UnsatisfiableSchema (found by an outside probe)."""
    value = instance_of(schema)
    assert "b" not in value and isinstance(value.get("a", value.get("name")), str)
