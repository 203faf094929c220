"""Running one tool call of the model against the response's MCP servers.

The worker's tool loop calls :meth:`ToolExecutor.call` with what the model addressed (a server
label and a tool name) and the raw argument text, and always gets a :class:`ToolOutcome` back: a tool
that errors, a timeout, an unreachable server or arguments that are not JSON become ``error``; it
never raises (except on cancellation).

The translator names the server label of a harmony recipient; the call goes to that server as:

- ``<label>.<tool>`` (an MCP namespace): the tool of that server, arguments a JSON object;
- ``python`` (built-in): its code text goes to the server's ``python`` tool as ``{"code": text}``;
- ``browser.search`` / ``browser.open`` / ``browser.find`` (built-in): the tool of the same name,
  arguments the JSON object the model wrote.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import mcp_types
from mcp.shared.exceptions import MCPError

from oss_responses.harmony.builtin_tools import (
    BROWSER,
    BROWSER_ACTIONS,
    PYTHON,
    PYTHON_CODE_ARGUMENT,
)
from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.metrics import MCP_CALL_ERRORS, MCP_CALL_SECONDS
from oss_responses.tools.mcp_client import McpSessionPool, McpUnavailable
from oss_responses.tools.policy import ResolvedServer, allowed_tools, is_tool_allowed

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolOutcome:
    """The result of one tool call: ``output`` when it succeeded, else ``error`` (for the model)."""

    output: str | None = None
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


class ToolExecutor(Protocol):
    async def call(self, server_label: str, tool: str, arguments: str, *, idempotent: bool = False) -> ToolOutcome:
        """Run the call; ``idempotent``: it may be sent again when the connection broke after it was sent."""
        ...


class McpToolExecutor:
    """Tool calls of one response, on the worker's session pool."""

    def __init__(self, pool: McpSessionPool, servers: Sequence[ResolvedServer], *, timeout: float) -> None:
        self._pool = pool
        self._servers = {server.label: server for server in servers}
        self._timeout = timeout

    async def list_tools(self, server_label: str) -> list[McpToolSpec]:
        """The server's tools the model may use (``allowed_tools`` applied); raises McpUnavailable."""
        server = self._servers[server_label]
        try:
            tools = await self._pool.list_tools(server.endpoint, self._timeout)
        except TimeoutError as exc:
            raise McpUnavailable(f"listing the tools of '{server_label}' timed out after {self._timeout:g} s") from exc
        except MCPError as exc:
            raise McpUnavailable(f"the MCP server '{server_label}' refused to list its tools: {exc}") from exc
        return allowed_tools(server, tools)

    async def call(self, server_label: str, tool: str, arguments: str, *, idempotent: bool = False) -> ToolOutcome:
        server = self._servers.get(server_label)
        if server is None:
            return ToolOutcome(error=f"no MCP server labelled '{server_label}' in this response")
        if not is_tool_allowed(server, McpToolSpec(tool)):
            return ToolOutcome(error=f"the tool '{tool}' of '{server_label}' is not allowed in this response")
        try:
            name, payload = _mcp_call(server, tool, arguments)
        except ValueError as exc:
            return ToolOutcome(error=str(exc))
        return await self._call(server, name, payload, idempotent)

    async def _call(self, server: ResolvedServer, name: str, payload: dict[str, Any], idempotent: bool) -> ToolOutcome:
        started = time.perf_counter()
        outcome = await self._call_timed(server, name, payload, idempotent)
        MCP_CALL_SECONDS.labels(server.metric_label).observe(time.perf_counter() - started)
        if outcome.failed:
            MCP_CALL_ERRORS.labels(server.metric_label).inc()
        return outcome

    async def _call_timed(
        self, server: ResolvedServer, name: str, payload: dict[str, Any], idempotent: bool
    ) -> ToolOutcome:
        try:
            result = await self._pool.call_tool(server.endpoint, name, payload, self._timeout, resend=idempotent)
        except TimeoutError:
            return ToolOutcome(error=f"the call to '{server.label}.{name}' timed out after {self._timeout:g} s")
        except McpUnavailable as exc:
            return ToolOutcome(error=f"the MCP server '{server.label}' is unreachable: {exc}")
        except MCPError as exc:
            return ToolOutcome(error=f"the MCP server '{server.label}' refused the call: {exc}")
        except Exception as exc:  # boundary: a tool turn must never crash the response
            logger.warning("MCP call to %s.%s failed: %s", server.label, name, type(exc).__name__)
            return ToolOutcome(error=f"the call to '{server.label}.{name}' failed ({type(exc).__name__})")
        text = result_text(result)
        return ToolOutcome(error=text or "the tool reported an error") if result.is_error else ToolOutcome(output=text)


def _block_text(block: Any) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, (mcp_types.ImageContent, mcp_types.AudioContent)):
        kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
        return f"[{kind} ({block.mime_type}) not shown: gpt-oss reads text only]"
    return str(block.model_dump_json(exclude_none=True))


def _mcp_call(server: ResolvedServer, tool: str, arguments: str) -> tuple[str, dict[str, Any]]:
    """The MCP tool name and arguments for the model's call (raises ValueError for the model)."""
    if server.builtin == PYTHON:
        return PYTHON, {PYTHON_CODE_ARGUMENT: arguments}
    if server.builtin == BROWSER and tool not in BROWSER_ACTIONS:
        raise ValueError(f"the browser tool has no '{tool}' action (use {', '.join(sorted(BROWSER_ACTIONS))})")
    return tool, _json_object(arguments)


def _json_object(arguments: str) -> dict[str, Any]:
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the arguments are not valid JSON: {exc.msg} at position {exc.pos}") from exc
    if not isinstance(value, dict):
        raise ValueError("the arguments must be a JSON object")
    return value


def result_text(result: mcp_types.CallToolResult) -> str:
    """The text the model reads: text parts as they are, an image or audio part as a note saying so
    (its base64 would fill the context: 100 KB of image cost 94,000 prompt tokens), other parts and
    structured content as JSON."""
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "\n".join(parts)
