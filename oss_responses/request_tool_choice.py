"""A request's ``tool_choice``, validated: its shape (:func:`parse_tool_choice`), then, once the request's
tools are parsed, that it names tools the request has (:func:`check_choice_offered`). What a valid choice
shows the model and forces is ``harmony/tool_choice.py``'s.
"""

from __future__ import annotations

from typing import Any

from openai.types.responses.tool import Mcp

from oss_responses.errors import BadRequest
from oss_responses.harmony.builtin_tools import TOOL_TYPES
from oss_responses.harmony.mcp_tools import MCP_TOOL_NAME, MCP_TOOL_NAME_PATTERN
from oss_responses.harmony.tool_choice import (
    ALLOWED_TOOLS,
    allows,
    forced_tool_missing,
)
from oss_responses.validation_errors import mismatch


def parse_tool_choice(value: Any) -> Any:
    """``tool_choice`` as sent, checked for shape; a 400 naming the part that is wrong."""
    # A forcing choice is honoured by writing the start of the call for the model
    # (harmony/render.py: forced_call_header); harmony has no other switch.
    if value in ("auto", "none", "required"):
        return value
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == ALLOWED_TOOLS:
        return _allowed_tools_choice(value)
    if kind in _CHOICE_KEYS:
        return _named_choice(value, kind)
    if isinstance(kind, str):
        raise BadRequest(f"Invalid value for 'tool_choice.type': '{kind}' is not available on this server.",
                         param="tool_choice.type", code="unsupported_value")
    raise BadRequest("Invalid value for 'tool_choice': expected 'auto', 'none', 'required' or a tool choice "
                     "object.", param="tool_choice", code="invalid_value")


def check_choice_offered(request: Any) -> None:
    """The parsed request's ``tool_choice`` names tools of its ``tools``; an MCP choice without
    ``server_label`` is given the request's only MCP server's."""
    choice = request.tool_choice
    if isinstance(choice, dict) and choice["type"] == ALLOWED_TOOLS:
        _check_allowed_tools(choice["tools"], request.tools)
    if isinstance(choice, dict) and choice["type"] == "mcp" and "server_label" not in choice:
        request.tool_choice = _only_server(choice, request.tools)
    if isinstance(choice, dict) and choice["type"] == "mcp" and isinstance(choice.get("name"), str):
        _check_mcp_tool_name(choice["name"], "tool_choice.name")
    if (missing := forced_tool_missing(request)) is not None:
        raise BadRequest(f"Invalid value for 'tool_choice': {missing}", param="tool_choice")


# A choice naming one tool: its required keys, then its optional ones.
_CHOICE_KEYS: dict[str, tuple[set[str], set[str]]] = {
    "function": ({"type", "name"}, set()),
    # server_label may be left out when the request has one MCP tool (the Agents SDK's tool_choice="mcp").
    "mcp": ({"type"}, {"server_label", "name"}),
    **{kind: ({"type"}, set()) for kind in TOOL_TYPES},
}
_ALLOWED_ENTRY_KEYS = {"function": {"type", "name"}, "namespace": {"type", "name"}, "mcp": {"type", "server_label"}}


def _allowed_tools_choice(value: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "allowed_tools", "mode", "tools"}`` checked for shape (``tools`` is matched to the
    request's tools once they are parsed)."""
    if set(value) - {"type", "mode", "tools"} or value.get("mode") not in ("auto", "required"):
        raise BadRequest("Invalid value for 'tool_choice': allowed_tools has a 'mode' ('auto' or 'required') "
                         "and 'tools'.", param="tool_choice", code="invalid_value")
    entries = value.get("tools")
    if not isinstance(entries, list) or not entries:
        raise BadRequest("Invalid value for 'tool_choice.tools': expected a non-empty array of tools.",
                         param="tool_choice.tools", code="invalid_value")
    for index, entry in enumerate(entries):
        kind = entry.get("type") if isinstance(entry, dict) else None
        keys = _ALLOWED_ENTRY_KEYS.get(kind, {"type"}) if isinstance(kind, str) else None
        if keys is None or set(entry) != keys or not all(isinstance(entry[key], str) for key in keys):
            raise BadRequest(
                f"Invalid value for 'tool_choice.tools[{index}]': a function or namespace is named by 'name', an "
                "MCP server by 'server_label', a hosted tool by its 'type' alone.",
                param=f"tool_choice.tools[{index}]", code="invalid_value",
            )
    return value


def _named_choice(value: dict[str, Any], kind: str) -> dict[str, Any]:
    required, optional = _CHOICE_KEYS[kind]
    keys = set(value)
    if not required <= keys or keys - required - optional or not all(isinstance(v, str) for v in value.values()):
        listed = ", ".join(f"'{key}'" for key in sorted(required | optional))
        raise BadRequest(f"Invalid value for 'tool_choice': a {kind} choice has {listed} (strings).",
                         param="tool_choice", code="invalid_value")
    return value


def _check_mcp_tool_name(name: str, param: str) -> None:
    if not MCP_TOOL_NAME.match(name):
        raise mismatch(param, MCP_TOOL_NAME_PATTERN)


def _only_server(choice: dict[str, Any], tools: list[Any]) -> dict[str, Any]:
    servers = [tool.server_label for tool in tools if isinstance(tool, Mcp)]
    if len(servers) != 1:
        raise BadRequest(f"Missing required parameter: 'tool_choice.server_label' (the request has {len(servers)} "
                         "MCP tools).", param="tool_choice.server_label", code="missing_required_parameter")
    return {**choice, "server_label": servers[0]}


def _check_allowed_tools(entries: list[dict[str, Any]], tools: list[Any]) -> None:
    for index, entry in enumerate(entries):
        if not any(allows(entry, tool) for tool in tools):
            raise BadRequest(f"Invalid value for 'tool_choice.tools[{index}]': no such tool in 'tools'.",
                             param=f"tool_choice.tools[{index}]", code="invalid_value")
