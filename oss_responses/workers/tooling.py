"""A response's MCP tools, made ready on the engine loop before its prompt is rendered.

The servers are resolved from the request's tools (with the credentials that came with the task).
Each server whose tool list the conversation does not hold yet is listed, with its
``mcp_list_tools`` item streamed as it goes (a later turn reuses the stored list); a server that
cannot be listed gets a failed item and the response goes on without its tools. The runner gets a
:class:`~oss_responses.tools.executor.ToolExecutor` for the model's calls and the approval policy
the translator asks. A worker without an MCP session pool gets :class:`NoToolExecutor`: every call
fails with a clear error the model reads.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from openai.types.responses import ResponseStreamEvent, WebSearchPreviewTool, WebSearchTool
from openai.types.responses.tool import CodeInterpreter, Mcp

from oss_responses.config import Settings
from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.harmony.translator import ApprovalPolicy, ResponseTranslator
from oss_responses.requests import CreateResponseRequest
from oss_responses.tools.executor import McpToolExecutor, ToolExecutor, ToolOutcome
from oss_responses.tools.mcp_client import McpSessionPool, McpUnavailable
from oss_responses.tools.policy import ResolvedServer, requires_approval, resolve_servers

Emit = Callable[[list[ResponseStreamEvent]], None]


class NoToolExecutor:
    async def call(self, server_label: str, tool: str, arguments: str, *, idempotent: bool = False) -> ToolOutcome:
        return ToolOutcome(
            error=f"no MCP tool executor is configured on this worker: '{server_label}.{tool}' cannot run"
        )


@dataclass(slots=True)
class PreparedTools:
    executor: ToolExecutor
    servers: list[ResolvedServer] = field(default_factory=list)


def uses_mcp(request: CreateResponseRequest) -> bool:
    return any(isinstance(tool, (Mcp, CodeInterpreter, WebSearchPreviewTool, WebSearchTool)) for tool in request.tools)


async def prepare_tools(
    pool: McpSessionPool | None, request: CreateResponseRequest, settings: Settings, owner: str | None = None
) -> PreparedTools:
    """The response's servers (``owner``'s sessions) and their executor (raises BadRequest: the response fails)."""
    if pool is None or not uses_mcp(request) or request.tool_choice == "none":
        return PreparedTools(NoToolExecutor())
    servers = [replace(server, owner=owner) for server in await resolve_servers(request.tools, settings)]
    return PreparedTools(McpToolExecutor(pool, servers, timeout=settings.mcp_call_timeout_seconds), servers)


async def list_new_tools(
    tools: PreparedTools, stored: Mapping[str, list[McpToolSpec]], translator: ResponseTranslator, emit: Emit,
    started: Collection[str] = (),
) -> dict[str, list[McpToolSpec]]:
    """List every server without a stored list, streaming its mcp_list_tools item; label → tools.

    ``started``: labels whose item a lost worker opened (a takeover lists them again, into that item).
    """
    assert isinstance(tools.executor, McpToolExecutor)
    listed: dict[str, list[McpToolSpec]] = {}
    for server in tools.servers:
        # A hosted web search or code interpreter lists nothing, as OpenAI's: a built-in's tools are
        # harmony's own, shown to the model whatever the server lists.
        if server.label in stored or server.hosted:
            continue
        if server.label not in started:
            emit(translator.list_tools_started(server.label))
        try:
            specs = await tools.executor.list_tools(server.label)
        except McpUnavailable as exc:
            emit(translator.list_tools_failed(server.label, str(exc)))
            continue
        listed[server.label] = specs
        emit(translator.list_tools_completed(server.label, specs))
    return listed


def approval_policy(servers: Sequence[ResolvedServer], tools: Mapping[str, list[McpToolSpec]]) -> ApprovalPolicy:
    """(server_label, tool) → whether the call needs an mcp_approval_request (the tool's hints count)."""
    by_label = {server.label: server for server in servers}

    def needs_approval(server_label: str, tool: str) -> bool:
        server = by_label.get(server_label)
        if server is None:
            return False  # no such server: the call fails when run, nothing to approve
        spec = next((s for s in tools.get(server_label, []) if s.name == tool), None)
        annotations = spec.annotations if spec is not None else None
        return requires_approval(server, McpToolSpec(tool, annotations=annotations))

    return needs_approval


def idempotent_calls(settings: Settings, tools: Mapping[str, list[McpToolSpec]]) -> Callable[[str, str], bool]:
    """(server_label, tool) → whether a call cut by a lost worker may run again: the tool's
    ``idempotentHint``, or the operator's ``OSS_RESPONSES_IDEMPOTENT_TOOLS`` (``label.tool``, ``label.*``)."""
    marked = set(settings.idempotent_tools)

    def is_idempotent(server_label: str, tool: str) -> bool:
        if f"{server_label}.{tool}" in marked or f"{server_label}.*" in marked:
            return True
        spec = next((s for s in tools.get(server_label, []) if s.name == tool), None)
        return spec is not None and bool(spec.hint("idempotentHint"))

    return is_idempotent
