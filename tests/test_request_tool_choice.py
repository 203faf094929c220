"""A create request's ``tool_choice``: what is accepted, and the 400s that name the choice."""

from __future__ import annotations

import pytest
from support.create_requests import CALC, FUNCTION, refusal

from oss_responses.requests import parse_create_request


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_parse_request_tool_choice_auto_or_none_accepted(choice: str) -> None:
    assert parse_create_request({"model": "m", "tool_choice": choice}).tool_choice == choice


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "f"}])
def test_parse_request_tool_choice_forcing_a_function_accepted(choice: object) -> None:
    assert parse_create_request({"model": "m", "tools": [FUNCTION], "tool_choice": choice}).tool_choice == choice


def test_parse_request_tool_choice_naming_no_function_of_tools_refused() -> None:
    error = refusal({"tools": [FUNCTION], "tool_choice": {"type": "function", "name": "g"}})
    assert error.param == "tool_choice" and "'g'" in error.message


def test_parse_request_tool_choice_required_without_function_tool_refused() -> None:
    assert refusal({"tool_choice": "required"}).param == "tool_choice"


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
    assert refusal({"tools": TOOLS, "tool_choice": choice}).param == param


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
    error = refusal({"tools": [CALC | {"allowed_tools": allowed}],
                      "tool_choice": {"type": "mcp", "server_label": "calc", "name": "mul"}})
    assert error.param == "tool_choice" and "'mul'" in error.message and "allowed_tools" in error.message


@pytest.mark.parametrize("allowed", [["mul"], {"tool_names": ["mul"], "read_only": True}, {"read_only": True}, None])
def test_parse_request_tool_choice_naming_mcp_tool_allowed_accepted(allowed: object) -> None:
    choice = {"type": "mcp", "server_label": "calc", "name": "mul"}
    request = parse_create_request({"model": "m", "tools": [CALC | {"allowed_tools": allowed}], "tool_choice": choice})
    assert request.tool_choice == choice


@pytest.mark.parametrize("name", ["with space", "a<|end|>", "x" * 129, ""])
def test_parse_request_tool_choice_naming_mcp_tool_no_recipient_can_hold_refused(name: str) -> None:
    error = refusal({"tools": [CALC], "tool_choice": {"type": "mcp", "server_label": "calc", "name": name}})
    assert (error.param, error.code) == ("tool_choice.name", "invalid_value")


def test_parse_request_tool_choice_mcp_without_label_among_two_servers_refused() -> None:
    error = refusal({"tools": [CALC, CALC | {"server_label": "docs"}], "tool_choice": {"type": "mcp"}})
    assert (error.param, error.code) == ("tool_choice.server_label", "missing_required_parameter")


@pytest.mark.parametrize(("choice", "named"), [
    ({"type": "mcp", "server_label": "docs"}, "'docs'"),
    ({"type": "code_interpreter"}, "code_interpreter"),
    ({"type": "web_search_preview"}, "web_search_preview"),
])
def test_parse_request_tool_choice_forcing_tool_not_in_tools_refused(choice: dict, named: str) -> None:
    error = refusal({"tools": [FUNCTION, CALC], "tool_choice": choice})
    assert error.param == "tool_choice" and named in error.message


@pytest.mark.parametrize("choice", [{"type": "mcp", "server_label": 1}, {"type": "code_interpreter", "name": "x"},
                                    {"type": "function", "name": "f", "strict": True}])
def test_parse_request_tool_choice_malformed_refused(choice: dict) -> None:
    error = refusal({"tools": TOOLS, "tool_choice": choice})
    assert (error.param, error.code) == ("tool_choice", "invalid_value")


@pytest.mark.parametrize("kind", ["file_search", "image_generation", "custom", "shell"])
def test_parse_request_tool_choice_forcing_tool_kind_not_served_refused(kind: str) -> None:
    error = refusal({"tools": TOOLS, "tool_choice": {"type": kind}})
    assert (error.param, error.code) == ("tool_choice.type", "unsupported_value")
