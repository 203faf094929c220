"""A create request's tools: what is accepted, and the 400s that name the tool, its name or its parameters."""

from __future__ import annotations

import pytest
from support.create_requests import CALC, FUNCTION, OPEN_OBJECT, OPEN_OBJECT_PROBLEM, refusal

from oss_responses.requests import parse_create_request


@pytest.mark.parametrize("name", ["get weather", "a/b", "a.b", "f" * 65, ""])
def test_parse_request_function_name_outside_openai_pattern_refused(name: str) -> None:
    error = refusal({"tools": [FUNCTION | {"name": name}]})
    assert error.param == "tools[0].name"
    assert error.code == ("string_above_max_length" if len(name) > 64 else "invalid_value")


@pytest.mark.parametrize("name", ["get-weather", "get_weather_2", "F" * 64])
def test_parse_request_function_name_in_openai_pattern_accepted(name: str) -> None:
    assert parse_create_request({"model": "m", "tools": [FUNCTION | {"name": name}]}).tools[0].name == name


def test_parse_request_value_of_union_names_the_value_not_the_branch() -> None:
    error = refusal({"tools": [CALC | {"require_approval": "sometimes"}]})
    assert (error.param, error.message) == ("tools[0].require_approval",
                                            "Invalid value: 'sometimes'. Supported values are: 'always' or 'never'.")


def test_parse_request_function_parameters_that_are_no_schema_refused() -> None:
    parameters = {"type": "object", "properties": {"a": {"type": "strin"}}}
    error = refusal({"tools": [{"type": "function", "name": "f", "parameters": parameters}]})
    assert error.message == ("Invalid schema for function 'f': In context=('properties', 'a'), 'strin' is not valid "
                             "under any of the given schemas.")
    assert (error.param, error.code) == ("tools[0].parameters", "invalid_function_parameters")


def test_parse_request_strict_function_outside_strict_subset_refused() -> None:
    error = refusal({"tools": [{"type": "function", "name": "f", "strict": True, "parameters": OPEN_OBJECT}]})
    assert error.message == f"Invalid schema for function 'f': {OPEN_OBJECT_PROBLEM}"
    assert (error.param, error.code) == ("tools[0].parameters", "invalid_function_parameters")


def test_parse_request_strict_namespace_function_outside_strict_subset_refused() -> None:
    namespace = {"type": "namespace", "name": "ns", "description": "d", "tools": [
        {"type": "function", "name": "g", "strict": True, "parameters": OPEN_OBJECT}]}
    assert refusal({"tools": [namespace]}).param == "tools[0].tools[0].parameters"


@pytest.mark.parametrize("strict", [False, None])
def test_parse_request_function_not_strict_takes_open_object(strict: bool | None) -> None:
    tools = [{"type": "function", "name": "f", "strict": strict, "parameters": OPEN_OBJECT}]
    assert len(parse_create_request({"model": "m", "input": "hi", "tools": tools}).tools) == 1


def test_parse_request_function_parameters_not_an_object_refused() -> None:
    error = refusal({"tools": [{"type": "function", "name": "f", "strict": False,
                                 "parameters": {"type": "string"}}]})
    assert error.message == "Invalid schema for function 'f': schema must be a JSON Schema of 'type: \"object\"', " \
        "got 'type: \"string\"'."


@pytest.mark.parametrize("name", ["Host", "content-length", "Transfer-Encoding", "Connection"])
def test_parse_request_mcp_header_that_routes_the_request_refused(name: str) -> None:
    """A request's ``Host`` went to the allow-listed server's address in place of the URL's host."""
    error = refusal({"tools": [{**CALC, "headers": {name: "admin.internal"}}]})
    assert (error.param, error.code) == ("tools[0].headers", "invalid_value")


@pytest.mark.parametrize(("name", "value"), [("X-Team", "a\r\nHost: admin.internal"), ("X Team", "a"), ("", "a")])
def test_parse_request_mcp_header_not_valid_http_refused(name: str, value: str) -> None:
    error = refusal({"tools": [{**CALC, "headers": {name: value}}]})
    assert error.param == "tools[0].headers"


def test_parse_request_mcp_headers_of_the_client_accepted() -> None:
    request = parse_create_request({"model": "m", "input": "hi", "tools": [
        {**CALC, "headers": {"X-Team": "a", "Mcp-Session-Id": "s1", "X-Api-Key": "k=v; x"}}]})
    assert request.tools is not None
