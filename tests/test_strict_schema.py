"""OpenAI's checks of the schemas a request gives the model: an object root, and the strict subset."""

from __future__ import annotations

from typing import Any

import pytest
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel

from oss_responses.strict_schema import object_root_problem, strict_problem

CLOSED = {"type": "object", "additionalProperties": False}


class Step(BaseModel):
    explanation: str
    output: int | None


class Reasoning(BaseModel):
    steps: list[Step]
    final_answer: str


def test_strict_problem_none_for_schema_the_sdk_makes_strict() -> None:
    # What responses.parse(text_format=Model) and the Agents SDK send: nested models, $defs, anyOf.
    assert strict_problem(to_strict_json_schema(Reasoning)) is None


def test_strict_problem_open_object_names_additional_properties() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    assert strict_problem(schema) == (
        "In context=(), 'additionalProperties' is required to be supplied and to be false."
    )


def test_strict_problem_optional_property_names_first_missing() -> None:
    schema = CLOSED | {"properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a"]}
    assert strict_problem(schema) == (
        "In context=(), 'required' is required to be supplied and to be an array including every key in "
        "properties. Missing 'b'."
    )


def test_strict_problem_required_key_without_property_is_extra() -> None:
    schema = CLOSED | {"properties": {"a": {"type": "string"}}, "required": ["a", "z"]}
    assert strict_problem(schema) == "In context=(), Extra required key 'z' supplied."


@pytest.mark.parametrize(("inner", "context"), [
    ({"properties": {"x": {"type": "object", "properties": {}}}}, "('properties', 'x')"),
    ({"properties": {"x": {"type": "array", "items": {"type": "object"}}}}, "('properties', 'x', 'items')"),
    ({"properties": {"x": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/d"}]}},
      "$defs": {"d": {"type": "object", "properties": {"q": {"type": "string"}}}}}, "('$defs', 'd')"),
    ({"properties": {"x": {"anyOf": [{"type": "null"}, {"type": "object"}]}}}, "('properties', 'x', 'anyOf', 1)"),
])
def test_strict_problem_nested_open_object_named_by_its_context(inner: dict[str, Any], context: str) -> None:
    schema = CLOSED | {"required": list(inner["properties"])} | inner
    assert strict_problem(schema) == (
        f"In context={context}, 'additionalProperties' is required to be supplied and to be false."
    )


def test_strict_problem_closed_object_without_properties_needs_no_required() -> None:
    assert strict_problem(CLOSED) is None


def test_strict_problem_ignores_non_object_schemas() -> None:
    assert strict_problem({"type": "string", "enum": ["a"]}) is None


@pytest.mark.parametrize(("schema", "problem"), [
    ({"type": "array", "items": {}}, "got 'type: \"array\"'."),
    ({"oneOf": [{"type": "object"}]}, "got 'type: \"None\"'."),
])
def test_object_root_problem_names_root_type(schema: dict[str, Any], problem: str) -> None:
    assert object_root_problem(schema) == f"schema must be a JSON Schema of 'type: \"object\"', {problem}"


@pytest.mark.parametrize("schema", [{}, None, {"type": "object"}])
def test_object_root_problem_none_for_object_or_no_parameters(schema: Any) -> None:
    assert object_root_problem(schema) is None
