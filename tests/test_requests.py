"""The create-request body: what is accepted, and the 400s that name the parameter."""

from __future__ import annotations

from typing import Any

import pytest

from oss_responses.errors import BadRequest
from oss_responses.requests import MAX_INPUT_TEXT, parse_create_request


def _refusal(body: dict) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        parse_create_request({"model": "m", "input": "hi", **body})
    return caught.value


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_parse_request_tool_choice_auto_or_none_accepted(choice: str) -> None:
    assert parse_create_request({"model": "m", "tool_choice": choice}).tool_choice == choice


FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object"}}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "f"}])
def test_parse_request_tool_choice_forcing_a_function_accepted(choice: object) -> None:
    assert parse_create_request({"model": "m", "tools": [FUNCTION], "tool_choice": choice}).tool_choice == choice


def test_parse_request_tool_choice_naming_no_function_of_tools_refused() -> None:
    error = _refusal({"tools": [FUNCTION], "tool_choice": {"type": "function", "name": "g"}})
    assert error.param == "tool_choice" and "'g'" in error.message


def test_parse_request_tool_choice_required_without_function_tool_refused() -> None:
    assert _refusal({"tool_choice": "required"}).param == "tool_choice"


CALC = {"type": "mcp", "server_label": "calc"}
TOOLS = [FUNCTION, {"type": "function", "name": "g", "parameters": {"type": "object"}}, CALC,
         {"type": "code_interpreter", "container": {"type": "auto"}}]


@pytest.mark.parametrize("mode", ["auto", "required"])
@pytest.mark.parametrize("allowed", [[{"type": "function", "name": "g"}],
                                     [{"type": "function", "name": "f"}, CALC, {"type": "code_interpreter"}]])
def test_parse_request_tool_choice_allowed_tools_of_tools_accepted(mode: str, allowed: list[dict]) -> None:
    choice = {"type": "allowed_tools", "mode": mode, "tools": allowed}
    assert parse_create_request({"model": "m", "tools": TOOLS, "tool_choice": choice}).tool_choice == choice


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        ({"type": "allowed_tools", "mode": "auto", "tools": []}, "tool_choice.tools"),
        ({"type": "allowed_tools", "mode": "sometimes", "tools": [CALC]}, "tool_choice"),
        ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function"}]}, "tool_choice.tools[0]"),
        ({"type": "allowed_tools", "mode": "auto", "tools": [CALC | {"name": "add"}]}, "tool_choice.tools[0]"),
        ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "h"}]},
         "tool_choice.tools[0]"),
        ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "mcp", "server_label": "docs"}]},
         "tool_choice.tools[0]"),
        ({"type": "allowed_tools", "mode": "required", "tools": [CALC, {"type": "code_interpreter"}]}, "tool_choice"),
    ],
)
def test_parse_request_tool_choice_allowed_tools_refused(choice: dict, param: str) -> None:
    assert _refusal({"tools": TOOLS, "tool_choice": choice}).param == param


@pytest.mark.parametrize("choice", [
    {"type": "mcp", "server_label": "calc"},
    {"type": "mcp", "server_label": "calc", "name": "add"},
    {"type": "code_interpreter"},
    {"type": "allowed_tools", "mode": "required", "tools": [CALC]},
])
def test_parse_request_tool_choice_forcing_tool_of_tools_accepted(choice: dict) -> None:
    assert parse_create_request({"model": "m", "tools": TOOLS, "tool_choice": choice}).tool_choice == choice


@pytest.mark.parametrize("choice", [{"type": "web_search_preview"}, {"type": "web_search"}])
def test_parse_request_tool_choice_web_search_forces_any_web_search_tool(choice: dict) -> None:
    tools = [{"type": "web_search_preview"}]
    assert parse_create_request({"model": "m", "tools": tools, "tool_choice": choice}).tool_choice == choice


def test_parse_request_tool_choice_required_with_one_non_function_tool_accepted() -> None:
    assert parse_create_request({"model": "m", "tools": [CALC], "tool_choice": "required"}).tool_choice == "required"


def test_parse_request_tool_choice_mcp_without_label_names_the_only_server() -> None:
    # The Agents SDK's tool_choice="mcp" sends {"type": "mcp"}.
    request = parse_create_request({"model": "m", "tools": [FUNCTION, CALC], "tool_choice": {"type": "mcp"}})
    assert request.tool_choice == {"type": "mcp", "server_label": "calc"}


@pytest.mark.parametrize("allowed", [["add"], {"tool_names": ["add"]}, {"tool_names": ["add"], "read_only": False}])
def test_parse_request_tool_choice_naming_mcp_tool_its_allowed_tools_leave_out_refused(allowed: object) -> None:
    error = _refusal({"tools": [CALC | {"allowed_tools": allowed}],
                      "tool_choice": {"type": "mcp", "server_label": "calc", "name": "mul"}})
    assert error.param == "tool_choice" and "'mul'" in error.message and "allowed_tools" in error.message


@pytest.mark.parametrize("allowed", [["mul"], {"tool_names": ["mul"], "read_only": True}, {"read_only": True}, None])
def test_parse_request_tool_choice_naming_mcp_tool_allowed_accepted(allowed: object) -> None:
    choice = {"type": "mcp", "server_label": "calc", "name": "mul"}
    request = parse_create_request({"model": "m", "tools": [CALC | {"allowed_tools": allowed}], "tool_choice": choice})
    assert request.tool_choice == choice


@pytest.mark.parametrize("name", ["with space", "a<|end|>", "x" * 129, ""])
def test_parse_request_tool_choice_naming_mcp_tool_no_recipient_can_hold_refused(name: str) -> None:
    error = _refusal({"tools": [CALC], "tool_choice": {"type": "mcp", "server_label": "calc", "name": name}})
    assert (error.param, error.code) == ("tool_choice.name", "invalid_value")


def test_parse_request_tool_choice_mcp_without_label_among_two_servers_refused() -> None:
    error = _refusal({"tools": [CALC, CALC | {"server_label": "docs"}], "tool_choice": {"type": "mcp"}})
    assert (error.param, error.code) == ("tool_choice.server_label", "missing_required_parameter")


@pytest.mark.parametrize(("choice", "named"), [
    ({"type": "mcp", "server_label": "docs"}, "'docs'"),
    ({"type": "code_interpreter"}, "code_interpreter"),
    ({"type": "web_search_preview"}, "web_search_preview"),
])
def test_parse_request_tool_choice_forcing_tool_not_in_tools_refused(choice: dict, named: str) -> None:
    error = _refusal({"tools": [FUNCTION, CALC], "tool_choice": choice})
    assert error.param == "tool_choice" and named in error.message


@pytest.mark.parametrize("choice", [{"type": "mcp", "server_label": 1}, {"type": "code_interpreter", "name": "x"},
                                    {"type": "function", "name": "f", "strict": True}])
def test_parse_request_tool_choice_malformed_refused(choice: dict) -> None:
    error = _refusal({"tools": TOOLS, "tool_choice": choice})
    assert (error.param, error.code) == ("tool_choice", "invalid_value")


@pytest.mark.parametrize("kind", ["file_search", "image_generation", "custom", "shell"])
def test_parse_request_tool_choice_forcing_tool_kind_not_served_refused(kind: str) -> None:
    error = _refusal({"tools": TOOLS, "tool_choice": {"type": kind}})
    assert (error.param, error.code) == ("tool_choice.type", "unsupported_value")


def test_parse_request_unknown_field_refused() -> None:
    error = _refusal({"bogus": 1})
    assert (error.message, error.param, error.code) == ("Unknown parameter: 'bogus'.", "bogus", "unknown_parameter")


@pytest.mark.parametrize("name", ["get weather", "a/b", "a.b", "f" * 65, ""])
def test_parse_request_function_name_outside_openai_pattern_refused(name: str) -> None:
    error = _refusal({"tools": [FUNCTION | {"name": name}]})
    assert error.param == "tools[0].name"
    assert error.code == ("string_above_max_length" if len(name) > 64 else "invalid_value")


@pytest.mark.parametrize("name", ["get-weather", "get_weather_2", "F" * 64])
def test_parse_request_function_name_in_openai_pattern_accepted(name: str) -> None:
    assert parse_create_request({"model": "m", "tools": [FUNCTION | {"name": name}]}).tools[0].name == name


def test_parse_request_json_schema_format_name_outside_pattern_refused() -> None:
    error = _refusal({"text": {"format": {"type": "json_schema", "name": "bad name!", "schema": {}}}})
    assert (error.param, error.code) == ("text.format.name", "invalid_value")


def test_parse_request_json_schema_format_without_name_is_missing_parameter() -> None:
    error = _refusal({"text": {"format": {"type": "json_schema", "schema": {}}}})
    assert (error.message, error.code) == ("Missing required parameter: 'text.format.name'.",
                                           "missing_required_parameter")


@pytest.mark.parametrize(("metadata", "param", "code"), [
    ({"k" * 65: "v"}, "metadata", "string_above_max_length"),
    ({"k": "v" * 513}, "metadata.k", "string_above_max_length"),
    ({f"k{i}": "v" for i in range(17)}, "metadata", "object_above_max_properties"),
])
def test_parse_request_metadata_past_openai_limits_refused(metadata: dict, param: str, code: str) -> None:
    error = _refusal({"metadata": metadata})
    assert (error.param, error.code) == (param, code)


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "x" * (MAX_INPUT_TEXT + 1)}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "x" * (MAX_INPUT_TEXT + 1)}]}]},
     "input[0].content[0].text"),
])
def test_parse_request_input_text_past_openai_length_refused(body: dict, param: str) -> None:
    error = _refusal(body)
    assert (error.param, error.code) == (param, "string_above_max_length")


def test_parse_request_input_text_at_openai_length_accepted() -> None:
    assert len(parse_create_request({"model": "m", "input": "x" * MAX_INPUT_TEXT}).input) == MAX_INPUT_TEXT


def test_parse_request_max_output_tokens_below_16_refused_as_openai_words_it() -> None:
    error = _refusal({"max_output_tokens": 15})
    assert (error.message, error.code) == (
        "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 15 instead.",
        "integer_below_min_value")


def test_parse_request_temperature_above_2_refused_as_openai_words_it() -> None:
    error = _refusal({"temperature": 3})
    assert (error.param, error.code) == ("temperature", "decimal_above_max_value")


def test_parse_request_input_part_of_wrong_type_names_the_part_and_the_allowed_types() -> None:
    # Not the string branch of content's union ("input[0].content.str: Input should be a valid string").
    error = _refusal({"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]})
    assert (error.param, error.code) == ("input[0].content[0].type", "invalid_value")
    assert error.message == ("Invalid value: 'output_text'. Supported values are: 'input_text', 'input_image', "
                             "'input_file'.")


def test_parse_request_input_part_field_of_wrong_type_names_the_field() -> None:
    error = _refusal({"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]})
    assert (error.param, error.code) == ("input[0].content[0].text", "invalid_type")


def test_parse_request_input_part_without_field_is_missing_parameter() -> None:
    error = _refusal({"input": [{"role": "user", "content": [{"type": "input_text"}]}]})
    assert (error.param, error.code) == ("input[0].content[0].text", "missing_required_parameter")


def test_parse_request_value_of_union_names_the_value_not_the_branch() -> None:
    error = _refusal({"tools": [CALC | {"require_approval": "sometimes"}]})
    assert (error.param, error.message) == ("tools[0].require_approval",
                                            "Invalid value: 'sometimes'. Supported values are: 'always' or 'never'.")


def test_parse_request_string_for_boolean_refused() -> None:
    assert _refusal({"stream": "yes"}).param == "stream"


def test_parse_request_input_of_wrong_type_names_input() -> None:
    assert _refusal({"input": 42}).param == "input"


def test_parse_request_unsupported_item_type_names_the_item() -> None:
    error = _refusal({"input": [{"type": "computer_call_output", "call_id": "c"}]})
    assert (error.param, error.code) == ("input[0].type", "unsupported_value")


def test_parse_request_string_input_is_one_user_message() -> None:
    (item,) = parse_create_request({"model": "m", "input": "hello"}).input_items()
    assert (item.role, item.content) == ("user", "hello")


@pytest.mark.parametrize("item", [{"id": "msg_1"}, {"type": None, "id": "msg_1"}])
def test_parse_request_item_reference_without_type_is_a_reference(item: dict) -> None:
    [parsed] = parse_create_request({"model": "m", "input": [item]}).input
    assert (parsed.type, parsed.id) == ("item_reference", "msg_1")  # type: ignore[union-attr]


def test_parse_request_message_with_null_type_is_a_message() -> None:
    [parsed] = parse_create_request({"model": "m", "input": [{"type": None, "role": "user", "content": "hi"}]}).input
    assert (parsed.role, parsed.content) == ("user", "hi")  # type: ignore[union-attr]


@pytest.mark.parametrize("field", ["context_management", "prompt"])
def test_parse_request_openai_parameter_not_served_is_unsupported_not_unknown(field: str) -> None:
    error = _refusal({field: {"id": "x"}})
    assert (error.param, error.code) == (field, "unsupported_parameter")


def test_parse_request_openai_parameter_not_served_sent_as_null_is_left_out() -> None:
    assert parse_create_request({"model": "m", "prompt": None}).model == "m"



OPEN_OBJECT = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
OPEN_OBJECT_PROBLEM = "In context=(), 'additionalProperties' is required to be supplied and to be false."


def test_parse_request_strict_json_schema_outside_strict_subset_refused() -> None:
    error = _refusal({"text": {"format": {"type": "json_schema", "name": "out", "strict": True,
                                          "schema": OPEN_OBJECT}}})
    assert error.message == f"Invalid schema for response_format 'out': {OPEN_OBJECT_PROBLEM}"
    assert (error.param, error.code) == ("text.format.schema", "invalid_json_schema")


def test_parse_request_strict_json_schema_with_array_root_refused() -> None:
    error = _refusal({"text": {"format": {"type": "json_schema", "name": "out", "strict": True,
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
    error = _refusal({"text": {"format": {"type": "json_schema", "name": "out", "strict": strict, "schema": schema}}})
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


def test_parse_request_function_parameters_that_are_no_schema_refused() -> None:
    parameters = {"type": "object", "properties": {"a": {"type": "strin"}}}
    error = _refusal({"tools": [{"type": "function", "name": "f", "parameters": parameters}]})
    assert error.message == ("Invalid schema for function 'f': In context=('properties', 'a'), 'strin' is not valid "
                             "under any of the given schemas.")
    assert (error.param, error.code) == ("tools[0].parameters", "invalid_function_parameters")


def test_parse_request_strict_function_outside_strict_subset_refused() -> None:
    error = _refusal({"tools": [{"type": "function", "name": "f", "strict": True, "parameters": OPEN_OBJECT}]})
    assert error.message == f"Invalid schema for function 'f': {OPEN_OBJECT_PROBLEM}"
    assert (error.param, error.code) == ("tools[0].parameters", "invalid_function_parameters")


def test_parse_request_strict_namespace_function_outside_strict_subset_refused() -> None:
    namespace = {"type": "namespace", "name": "ns", "description": "d", "tools": [
        {"type": "function", "name": "g", "strict": True, "parameters": OPEN_OBJECT}]}
    assert _refusal({"tools": [namespace]}).param == "tools[0].tools[0].parameters"


@pytest.mark.parametrize("strict", [False, None])
def test_parse_request_function_not_strict_takes_open_object(strict: bool | None) -> None:
    tools = [{"type": "function", "name": "f", "strict": strict, "parameters": OPEN_OBJECT}]
    assert len(parse_create_request({"model": "m", "input": "hi", "tools": tools}).tools) == 1


def test_parse_request_function_parameters_not_an_object_refused() -> None:
    error = _refusal({"tools": [{"type": "function", "name": "f", "strict": False,
                                 "parameters": {"type": "string"}}]})
    assert error.message == "Invalid schema for function 'f': schema must be a JSON Schema of 'type: \"object\"', " \
        "got 'type: \"string\"'."
