"""An MCP server's tool list: what the model is shown and what an ``mcp_list_tools`` item holds.

:class:`McpToolSpec` is the service's one view of a listed tool (the MCP client lists servers into it,
the policy filters it, the journal records it). ``specs_from_item`` reads the tools
back from an ``mcp_list_tools`` item (a stored JSON dict or an openai model), so that a later turn
renders the list stored in the conversation instead of listing the server again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openai.types.responses.response_output_item import McpListToolsTool

# What an MCP tool's name may hold (the MCP spec's recommended characters): the model names it in a
# harmony recipient (``to=label.name``), which a space or a special token's text would end or break.
MCP_TOOL_NAME_PATTERN = "^[A-Za-z0-9_.-]{1,128}$"
MCP_TOOL_NAME = re.compile(MCP_TOOL_NAME_PATTERN)


@dataclass(frozen=True, slots=True)
class McpToolSpec:
    """One tool as an MCP server lists it."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None

    @property
    def read_only(self) -> bool | None:
        """The server's ``readOnlyHint`` (None when it gives none)."""
        hint = self.hint("readOnlyHint")
        return None if hint is None else bool(hint)

    def hint(self, name: str) -> Any:
        """An annotation under its MCP name (``readOnlyHint``), or under its Python name
        (``read_only_hint``), as listings stored before 2026-12-04 and some clients' items hold it."""
        if self.annotations is None:
            return None
        if name in self.annotations:
            return self.annotations[name]
        return self.annotations.get(re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m[1].lower(), name))


def field_of(item: Any, name: str, default: Any = None) -> Any:
    """A field of an item given as a JSON dict (stored) or as an openai model (a request's input)."""
    if isinstance(item, dict):
        return item.get(name, default)
    return getattr(item, name, default)


def list_entries(tools: Sequence[Any]) -> list[McpListToolsTool]:
    """The item's ``tools``; any object with name/description/input_schema/annotations will do."""
    return [
        McpListToolsTool(
            name=tool.name,
            description=getattr(tool, "description", None) or None,
            input_schema=getattr(tool, "input_schema", None) or {},
            annotations=getattr(tool, "annotations", None) or None,
        )
        for tool in tools
    ]


def specs_from_item(item: Any) -> list[McpToolSpec]:
    """The tools of an ``mcp_list_tools`` item (dict or model)."""
    return [
        McpToolSpec(
            name=field_of(tool, "name"),
            description=field_of(tool, "description") or "",
            input_schema=_as_dict(field_of(tool, "input_schema")),
            annotations=_as_dict(field_of(tool, "annotations")),
        )
        for tool in field_of(item, "tools") or []
    ]


def _as_dict(value: Any) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    dump = getattr(value, "model_dump", None)
    return dump() if dump is not None else dict(value)
