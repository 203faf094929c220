"""``tool_choice``: which of a request's tools the model is shown, and whether it must call a function.

- ``auto``: every tool; ``none``: none (the model is shown no tools);
- ``required`` or ``{"type": "function", "name": ...}``: every tool, and a function call is forced
  (``render.forced_call_header``);
- ``{"type": "allowed_tools", "mode": "auto" | "required", "tools": [...]}`` (the Vercel AI SDK's
  ``allowedTools``): only the tools listed. OpenAI keeps the others in the prompt (for its prompt
  cache) and stops the model calling them; gpt-oss has no such switch and would call what it reads,
  so here they are not rendered. Under ``mode: "required"`` a call of a listed function is forced.

An entry of ``allowed_tools`` names a function or namespace by ``name``, an MCP server by
``server_label``, and a hosted tool (``code_interpreter``, ``web_search``...) by its type alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openai.types.responses import FunctionTool

ALLOWED_TOOLS = "allowed_tools"


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


def forces_call(request: Any) -> bool:
    """Whether the model must call one of the functions it is shown (``required``, also of ``allowed_tools``)."""
    choice = request.tool_choice
    if isinstance(choice, dict):
        return bool(choice.get("type") == ALLOWED_TOOLS and choice.get("mode") == "required")
    return bool(choice == "required")


def forced_function(request: Any) -> str | None:
    """The function a named ``tool_choice`` makes the model call, if it names one."""
    choice = request.tool_choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return str(choice["name"])
    return None


def shown_functions(tools: Sequence[tuple[int, Any]]) -> list[str]:
    """The names of the plain function tools among ``tools`` (what a forced call may name)."""
    return [tool.name for _, tool in tools if isinstance(tool, FunctionTool)]
