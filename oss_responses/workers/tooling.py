"""A response's MCP tools, made ready on the engine loop before its prompt is rendered.

The servers are resolved from the request's tools (with the credentials that came with the task),
each non-built-in server's tool list is fetched (the model is shown it), and the runner gets a
:class:`~oss_responses.tools.executor.ToolExecutor` for the model's calls. A worker without an MCP
session pool gets :class:`NoToolExecutor`: every call fails with a clear error the model reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openai.types.responses import WebSearchPreviewTool
from openai.types.responses.tool import CodeInterpreter, Mcp

from oss_responses.config import Settings
from oss_responses.harmony.render import McpToolSpec
from oss_responses.requests import CreateResponseRequest
from oss_responses.tools.executor import McpToolExecutor, ToolExecutor, ToolOutcome
from oss_responses.tools.mcp_client import McpSessionPool
from oss_responses.tools.policy import resolve_servers


class NoToolExecutor:
    async def call(self, server_label: str, tool: str, arguments: str) -> ToolOutcome:
        return ToolOutcome(error=f"no MCP tool executor is configured on this worker: '{server_label}.{tool}' cannot run")


@dataclass(slots=True)
class PreparedTools:
    executor: ToolExecutor
    mcp_tools: dict[str, list[McpToolSpec]] = field(default_factory=dict)


def uses_mcp(request: CreateResponseRequest) -> bool:
    return any(isinstance(tool, (Mcp, CodeInterpreter, WebSearchPreviewTool)) for tool in request.tools)


async def prepare_tools(
    pool: McpSessionPool | None, request: CreateResponseRequest, settings: Settings
) -> PreparedTools:
    """The executor and the listed tools (raises McpUnavailable / BadRequest: the response fails)."""
    if pool is None or not uses_mcp(request) or request.tool_choice == "none":
        return PreparedTools(NoToolExecutor())
    servers = await resolve_servers(request.tools, settings)
    executor = McpToolExecutor(pool, servers, timeout=settings.mcp_call_timeout_seconds)
    listed: dict[str, list[McpToolSpec]] = {}
    for server in servers:
        if server.builtin is None:
            specs = await executor.list_tools(server.label)
            listed[server.label] = [McpToolSpec(s.name, s.description or "", s.input_schema) for s in specs]
    return PreparedTools(executor, listed)
