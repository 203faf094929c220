"""A request's tools, validated one by one with openai's own pydantic models, dispatched on ``type``; then
OpenAI's checks of their names (:func:`check_name`, also a response format's) and of their functions'
parameters.
"""

from __future__ import annotations

import re
from typing import Any

from openai.types.responses import FunctionTool, NamespaceTool, WebSearchPreviewTool, WebSearchTool
from openai.types.responses.tool import CodeInterpreter, Mcp

from oss_responses.errors import BadRequest
from oss_responses.request_items import type_of
from oss_responses.schema_shape import schema_problem
from oss_responses.strict_schema import object_root_problem, strict_problem
from oss_responses.validation_errors import mismatch, too_long, validate_one

RequestTool = FunctionTool | NamespaceTool | Mcp | CodeInterpreter | WebSearchPreviewTool | WebSearchTool

# OpenAI's rule for the names of functions and response formats. Here it also keeps harmony's headers
# whole: a function's name, a namespace's or an MCP server's label is the recipient ``to=NAMESPACE.NAME``,
# and a space or a dot in it would end or split that recipient.
NAME_PATTERN = "^[a-zA-Z0-9_-]+$"
NAME_MAX_LENGTH = 64
_NAME = re.compile(NAME_PATTERN)

_TOOL_MODELS: dict[str, type[RequestTool]] = {
    "function": FunctionTool,
    "namespace": NamespaceTool,
    "mcp": Mcp,
    "code_interpreter": CodeInterpreter,
    "web_search_preview": WebSearchPreviewTool,
    "web_search_preview_2025_03_11": WebSearchPreviewTool,
    "web_search": WebSearchTool,
    "web_search_2025_08_26": WebSearchTool,
}


def check_name(name: str, param: str) -> None:
    """A function's, namespace's, MCP server's or response format's name, as OpenAI checks it."""
    if len(name) > NAME_MAX_LENGTH:
        raise too_long(param, NAME_MAX_LENGTH, len(name))
    if not _NAME.match(name):
        raise mismatch(param, NAME_PATTERN)


def parse_tool(value: Any, param: str) -> RequestTool:
    if not isinstance(value, dict):
        raise BadRequest(f"Invalid value for '{param}': expected an object.", param=param)
    tool_type = type_of(value, "")
    model = _TOOL_MODELS.get(tool_type) if tool_type is not None else None
    if model is None:
        raise BadRequest(
            f"Invalid value for '{param}.type': tools of type '{value.get('type')}' are not supported "
            f"(supported: {', '.join(_TOOL_MODELS)}).",
            param=f"{param}.type",
            code="unsupported_value",
        )
    tool = validate_one(model, value, param)
    _check_tool_names(tool, param)
    if isinstance(tool, FunctionTool):
        _check_parameters(tool.name, tool.parameters, tool.strict, f"{param}.parameters")
    if isinstance(tool, Mcp):
        _check_mcp_headers(tool, param)
    if isinstance(tool, NamespaceTool):
        for index, function in enumerate(tool.tools):
            strict = getattr(function, "strict", None)
            _check_parameters(function.name, getattr(function, "parameters", None), strict,
                              f"{param}.tools[{index}].parameters")
    return tool


def _check_parameters(name: str, parameters: Any, strict: bool | None, param: str) -> None:
    """OpenAI's checks of a function's parameters: an object schema, and a strict one in the strict subset."""
    problem = (schema_problem(parameters) or object_root_problem(parameters)
               or (strict_problem(parameters) if strict else None))
    if problem is not None:
        raise BadRequest(f"Invalid schema for function '{name}': {problem}", param=param,
                         code="invalid_function_parameters")


# Headers that route or frame the HTTP exchange itself: the service sets them. A request's own ``Host`` went to the
# allow-listed server's address in place of the URL's host, reaching whatever other virtual host a shared
# ingress serves there.
CONNECTION_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "upgrade", "te",
                                "trailer", "keep-alive", "proxy-connection"})
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110's token
_HEADER_VALUE = re.compile(r"[^\x00\r\n]*")


def _check_mcp_headers(tool: Mcp, param: str) -> None:
    for name, value in (tool.headers or {}).items():
        if name.lower() in CONNECTION_HEADERS:
            raise BadRequest(f"Invalid value for '{param}.headers': '{name}' is set by the service, not by a request.",
                             param=f"{param}.headers", code="invalid_value")
        if not _HEADER_NAME.fullmatch(name) or not _HEADER_VALUE.fullmatch(value):
            raise BadRequest(f"Invalid value for '{param}.headers': '{name[:64]}' is not a valid HTTP header name "
                             "and value.", param=f"{param}.headers", code="invalid_value")


def _check_tool_names(tool: RequestTool, param: str) -> None:
    if isinstance(tool, FunctionTool | NamespaceTool):
        check_name(tool.name, f"{param}.name")
    if isinstance(tool, NamespaceTool):
        for index, function in enumerate(tool.tools):
            check_name(function.name, f"{param}.tools[{index}].name")
    if isinstance(tool, Mcp):
        check_name(tool.server_label, f"{param}.server_label")
