"""The create-request body: what is accepted, and the 400s that name the parameter."""

from __future__ import annotations

from typing import Any

import pytest
from support.create_requests import OPEN_OBJECT, OPEN_OBJECT_PROBLEM, refusal

from oss_responses.requests import parse_create_request


def test_parse_request_unknown_field_refused() -> None:
    error = refusal({"bogus": 1})
    assert (error.message, error.param, error.code) == ("Unknown parameter: 'bogus'.", "bogus", "unknown_parameter")


def test_parse_request_json_schema_format_name_outside_pattern_refused() -> None:
    error = refusal({"text": {"format": {"type": "json_schema", "name": "bad name!", "schema": {}}}})
    assert (error.param, error.code) == ("text.format.name", "invalid_value")


def test_parse_request_json_schema_format_without_name_is_missing_parameter() -> None:
    error = refusal({"text": {"format": {"type": "json_schema", "schema": {}}}})
    assert (error.message, error.code) == ("Missing required parameter: 'text.format.name'.",
                                           "missing_required_parameter")


@pytest.mark.parametrize(("metadata", "param", "code"), [
    ({"k" * 65: "v"}, "metadata", "string_above_max_length"),
    ({"k": "v" * 513}, "metadata.k", "string_above_max_length"),
    ({f"k{i}": "v" for i in range(17)}, "metadata", "object_above_max_properties"),
])
def test_parse_request_metadata_past_openai_limits_refused(metadata: dict, param: str, code: str) -> None:
    error = refusal({"metadata": metadata})
    assert (error.param, error.code) == (param, code)


def test_parse_request_max_output_tokens_below_16_refused_as_openai_words_it() -> None:
    error = refusal({"max_output_tokens": 15})
    assert (error.message, error.code) == (
        "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 15 instead.",
        "integer_below_min_value")


def test_parse_request_temperature_above_2_refused_as_openai_words_it() -> None:
    error = refusal({"temperature": 3})
    assert (error.param, error.code) == ("temperature", "decimal_above_max_value")


def test_parse_request_string_for_boolean_refused() -> None:
    assert refusal({"stream": "yes"}).param == "stream"


def test_parse_request_input_of_wrong_type_names_input() -> None:
    assert refusal({"input": 42}).param == "input"


def test_parse_request_string_input_is_one_user_message() -> None:
    (item,) = parse_create_request({"model": "m", "input": "hello"}).input_items()
    assert (item.role, item.content) == ("user", "hello")


@pytest.mark.parametrize("field", ["context_management", "prompt"])
def test_parse_request_openai_parameter_not_served_is_unsupported_not_unknown(field: str) -> None:
    error = refusal({field: {"id": "x"}})
    assert (error.param, error.code) == (field, "unsupported_parameter")


def test_parse_request_openai_parameter_not_served_sent_as_null_is_left_out() -> None:
    assert parse_create_request({"model": "m", "prompt": None}).model == "m"


def test_parse_request_strict_json_schema_outside_strict_subset_refused() -> None:
    error = refusal({"text": {"format": {"type": "json_schema", "name": "out", "strict": True,
                                          "schema": OPEN_OBJECT}}})
    assert error.message == f"Invalid schema for response_format 'out': {OPEN_OBJECT_PROBLEM}"
    assert (error.param, error.code) == ("text.format.schema", "invalid_json_schema")


def test_parse_request_strict_json_schema_with_array_root_refused() -> None:
    error = refusal({"text": {"format": {"type": "json_schema", "name": "out", "strict": True,
                                          "schema": {"type": "array", "items": {"type": "string"}}}}})
    assert "must be a JSON Schema of 'type: \"object\"'" in error.message and error.param == "text.format.schema"


@pytest.mark.parametrize("strict", [False, None])
def test_parse_request_json_schema_not_strict_takes_any_schema(strict: bool | None) -> None:
    text = {"format": {"type": "json_schema", "name": "out", "strict": strict, "schema": OPEN_OBJECT}}
    assert parse_create_request({"model": "m", "input": "hi", "text": text}).text is not None


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "object", "properties": 5}, "In context=(), 5 is not of type 'object'."),
        ({"type": "blorp"}, "In context=(), 'blorp' is not valid under any of the given schemas."),
        ({"type": "object", "properties": {"a": {"enum": []}}},
         "In context=('properties', 'a'), 'enum' must offer at least one value."),
    ],
)
@pytest.mark.parametrize("strict", [False, None])
def test_parse_request_json_schema_that_is_no_schema_refused_strict_or_not(
    schema: dict[str, Any], problem: str, strict: bool | None
) -> None:
    """Accepted, these failed in the worker with a Python exception as the response's error."""
    error = refusal({"text": {"format": {"type": "json_schema", "name": "out", "strict": strict, "schema": schema}}})
    assert error.message == f"Invalid schema for response_format 'out': {problem}"
    assert (error.param, error.code) == ("text.format.schema", "invalid_json_schema")


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "number"}]}},
     "definitions": {"x": {"type": "string"}}},  # draft-07, as zod-to-json-schema writes it
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
     "properties": {"t": {"type": "array", "items": [{"type": "string"}]}}},
    {"type": "object", "properties": {"n": {"type": ["string", "null"], "format": "date-time", "nullable": True}}},
])
def test_parse_request_json_schema_of_draft_07_or_unknown_keywords_accepted(schema: dict[str, Any]) -> None:
    text = {"format": {"type": "json_schema", "name": "out", "schema": schema}}
    assert parse_create_request({"model": "m", "input": "hi", "text": text}).text is not None
