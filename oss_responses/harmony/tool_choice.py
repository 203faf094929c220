"""``tool_choice``: which of a request's tools the model is shown, and which call, if any, it must make.

- ``auto``: every tool; ``none``: none (the model is shown no tools);
- ``required``, ``{"type": "function", "name": ...}``, ``{"type": "mcp", "server_label": ...}`` (and its
  ``name``) or a hosted tool's type (``{"type": "code_interpreter"}``...): every tool, and a call is
  forced (:func:`forced_call`; ``render.forced_call_header`` writes its start for the model).
  ``required`` forces a function call when a function is shown, else a call of the one tool shown;
- ``{"type": "allowed_tools", "mode": "auto" | "required", "tools": [...]}`` (the Vercel AI SDK's
  ``allowedTools``): only the tools listed. OpenAI keeps the others in the prompt (for its prompt
  cache) and stops the model calling them; gpt-oss has no such switch and would call what it reads,
  so here they are not rendered. Under ``mode: "required"`` a call of a listed function is forced.

An entry of ``allowed_tools`` names a function or namespace by ``name``, an MCP server by
``server_label``, and a hosted tool (``code_interpreter``, ``web_search``...) by its type alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openai.types.responses import FunctionTool, NamespaceTool
from openai.types.responses.tool import Mcp

from oss_responses.harmony.builtin_tools import BROWSER, BROWSER_ACTIONS, TOOL_TYPES
from oss_responses.harmony.messages import FUNCTIONS_NAMESPACE

ALLOWED_TOOLS = "allowed_tools"


@dataclass(frozen=True)
class ForcedCall:
    """The call ``tool_choice`` makes the model write: its harmony namespace (``functions``, a
    namespace tool's or MCP server's name, ``python``, ``browser``), and the tool in it when the
    choice names one (else the model names it)."""

    namespace: str
    name: str | None = None


def allows(entry: Mapping[str, Any], tool: Any) -> bool:
    """Whether an ``allowed_tools`` entry names ``tool`` (one of a request's tools)."""
    kind = entry.get("type")
    if kind != tool.type:
        return False
    if kind in ("function", "namespace"):
        return bool(entry.get("name") == tool.name)
    if kind == "mcp":
        return bool(entry.get("server_label") == tool.server_label)
    return True  # a hosted tool: its type names it


def usable_tools(request: Any) -> list[tuple[int, Any]]:
    """The request's tools the model is shown, with their indices in ``tools``."""
    choice = request.tool_choice
    if choice == "none":
        return []
    tools = list(enumerate(request.tools))
    if isinstance(choice, dict) and choice.get("type") == ALLOWED_TOOLS:
        return [(index, tool) for index, tool in tools if any(allows(entry, tool) for entry in choice["tools"])]
    return tools


def forced_call(request: Any, builtin_labels: Mapping[str, str]) -> ForcedCall | None:
    """The call ``tool_choice`` forces (None: the model decides, or the request's tools allow none;
    ``request_tool_choice.py`` refuses a forcing choice that names no tool of the request). ``builtin_labels``
    are the MCP server labels served as ``python``/``browser`` (``settings.builtin_tool_labels``)."""
    choice = request.tool_choice
    if _requires(choice):
        return _required_call(usable_tools(request), builtin_labels)
    if not isinstance(choice, dict):
        return None
    kind = choice.get("type")
    if kind == "function":
        return ForcedCall(FUNCTIONS_NAMESPACE, str(choice["name"]))
    if kind == "mcp":
        return _server_call(str(choice["server_label"]), choice.get("name"), builtin_labels)
    if kind in TOOL_TYPES:
        return ForcedCall(TOOL_TYPES[kind])
    return None


def _server_call(label: str, name: str | None, builtin_labels: Mapping[str, str]) -> ForcedCall:
    builtin = builtin_labels.get(label)
    if builtin is None:
        return ForcedCall(label, name)
    # A label served as a built-in: python has one recipient; the browser's name is an action.
    return ForcedCall(builtin, name if builtin == BROWSER and name in BROWSER_ACTIONS else None)


def _required_call(tools: Sequence[tuple[int, Any]], builtin_labels: Mapping[str, str]) -> ForcedCall | None:
    # A function when one is shown (gpt-oss calls functions in one namespace, ``functions.``);
    # otherwise the one tool shown. Harmony cannot leave the choice among several namespaces open.
    if shown_functions(tools):
        return ForcedCall(FUNCTIONS_NAMESPACE)
    if len(tools) != 1:
        return None
    tool = tools[0][1]
    if isinstance(tool, Mcp):
        return _server_call(tool.server_label, None, builtin_labels)
    if isinstance(tool, NamespaceTool):
        return ForcedCall(tool.name)
    return ForcedCall(TOOL_TYPES[tool.type])


def forced_tool_missing(request: Any) -> str | None:
    """Why a forcing ``tool_choice`` names no tool of the request (None: it names one, or forces nothing)."""
    choice = request.tool_choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        if choice["name"] not in shown_functions(usable_tools(request)):
            return f"no function tool named '{choice['name']}' in 'tools'."
    elif isinstance(choice, dict) and choice.get("type") == "mcp":
        server = next((tool for tool in request.tools
                       if isinstance(tool, Mcp) and tool.server_label == choice["server_label"]), None)
        if server is None:
            return f"no MCP tool with server_label '{choice['server_label']}' in 'tools'."
        names = _allowed_names(server)
        if choice.get("name") is not None and names is not None and choice["name"] not in names:
            return f"the tool '{choice['name']}' is not among the 'allowed_tools' of '{server.server_label}'."
    elif isinstance(choice, dict) and choice.get("type") in TOOL_TYPES:
        if not any(TOOL_TYPES.get(tool.type) == TOOL_TYPES[choice["type"]] for tool in request.tools):
            return f"no {choice['type']} tool in 'tools'."
    elif forced_call(request, {}) is None and _requires(choice):
        return ("'required' needs a function tool, or exactly one tool, among the tools it allows: gpt-oss "
                "is made to call one by writing the start of the call.")
    return None


def _allowed_names(server: Mcp) -> set[str] | None:
    """The tool names a server's ``allowed_tools`` may let the model call, as far as the request says
    (None: any; a filter's ``read_only`` narrows it further by the tools' annotations, which only the
    server's listing gives)."""
    allowed = server.allowed_tools
    if isinstance(allowed, list):
        return set(allowed)
    if allowed is not None and allowed.tool_names is not None:
        return set(allowed.tool_names)
    return None


def _requires(choice: Any) -> bool:
    return choice == "required" or (isinstance(choice, dict) and choice.get("type") == ALLOWED_TOOLS
                                    and choice.get("mode") == "required")


def shown_functions(tools: Sequence[tuple[int, Any]]) -> list[str]:
    """The names of the plain function tools among ``tools`` (what a forced call may name)."""
    return [tool.name for _, tool in tools if isinstance(tool, FunctionTool)]
