"""The create-request body: what is accepted, and the 400s that name the parameter."""

from __future__ import annotations

import pytest

from oss_responses.errors import BadRequest
from oss_responses.requests import parse_create_request


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


@pytest.mark.parametrize("choice", [{"type": "mcp", "server_label": "calc"}, {"type": "code_interpreter"}])
def test_parse_request_tool_choice_forcing_other_tool_kinds_refused(choice: object) -> None:
    error = _refusal({"tools": [FUNCTION], "tool_choice": choice})
    assert (error.param, error.code) == ("tool_choice", "unsupported_value")


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
        ({"type": "allowed_tools", "mode": "required", "tools": [CALC]}, "tool_choice"),
    ],
)
def test_parse_request_tool_choice_allowed_tools_refused(choice: dict, param: str) -> None:
    assert _refusal({"tools": TOOLS, "tool_choice": choice}).param == param


def test_parse_request_unknown_field_refused() -> None:
    error = _refusal({"bogus": 1})
    assert error.param == "bogus" and "Unrecognized request argument" in error.message


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
