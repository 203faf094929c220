"""Request + earlier turns → gpt-oss prompt token ids (openai-harmony, HARMONY_GPT_OSS).

Interface::

    render_prompt(request, history, options, encoding) -> RenderedPrompt
        .token_ids       prompt ending with "<|start|>assistant", ready for generation
        .new_messages    harmony message dicts this turn adds from its input (store them)
        .function_calls  call_id -> function name for function_call items in this turn's input
        .mcp_labels      harmony namespace -> MCP server_label (give it to ResponseTranslator)
        .approval        ApprovalAnswer | None: the input answers an approval request; then
                         token_ids END AFTER THE PENDING CALL (no "<|start|>assistant"): the worker
                         calls translator.open_approved_call / decline_call (+ feed_tool_result) and
                         generates on token_ids + translator.continuation_token_ids()

The prompt is a fresh system message (reasoning effort, dates, built-in tools), a fresh developer
message (instructions, response format, ``functions`` and one namespace per MCP server), then the
earlier turns' stored messages, then this turn's input. Analysis messages that a later final answer
closed are dropped; those of a still-open tool-call chain are kept (gpt-oss's rule).

MCP tool lists: ``RenderOptions.mcp_tools`` holds each server's full list as the server gave it
(listed for this response); a server not listed there is shown the latest list stored in the
conversation (``mcp_list_tools`` items of earlier turns or of this input, see
``history.listed_tools``). Render filters the list by the request's ``allowed_tools``. ``tool_choice="none"`` renders no tools;
``required`` and named choices cannot be enforced by gpt-oss and render like ``auto``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from openai.types.responses import FunctionTool
from openai.types.responses.tool import Mcp
from openai_harmony import (
    Conversation,
    DeveloperContent,
    HarmonyEncoding,
    Message,
    ReasoningEffort,
    RenderConversationConfig,
    Role,
    SystemContent,
    ToolDescription,
    ToolNamespaceConfig,
)

from oss_responses.errors import BadRequest
from oss_responses.harmony.history import (
    ApprovalAnswer,
    ConversationTurn,
    find_approval,
    listed_tools,
    stored_approval_ids,
)
from oss_responses.harmony.input_items import InputConverter, Unseal
from oss_responses.harmony.mcp_tools import McpToolSpec

__all__ = ["ConversationTurn", "McpToolSpec", "RenderOptions", "RenderedPrompt", "drop_closed_analysis", "render_prompt"]

_EFFORTS = {"low": ReasoningEffort.LOW, "medium": ReasoningEffort.MEDIUM, "high": ReasoningEffort.HIGH}


@dataclass(slots=True)
class RenderOptions:
    conversation_start_date: str
    knowledge_cutoff: str = "2024-06"
    default_reasoning_effort: str = "medium"
    builtin_tool_labels: Mapping[str, str] = field(default_factory=dict)  # server label -> python | browser
    mcp_tools: Mapping[str, list[McpToolSpec]] = field(default_factory=dict)  # server label -> full tool list
    unseal: Unseal | None = None  # opens reasoning and compaction items' encrypted_content (None: no keys)


@dataclass(slots=True)
class RenderedPrompt:
    token_ids: list[int]
    new_messages: list[dict[str, Any]]
    function_calls: dict[str, str]
    mcp_labels: dict[str, str]
    approval: ApprovalAnswer | None = None


@dataclass(slots=True)
class _Tools:
    """The request's tools, sorted into what harmony renders where."""

    builtins: dict[str, str] = field(default_factory=dict)  # namespace (python|browser) -> server label
    functions: list[ToolDescription] = field(default_factory=list)
    servers: list[ToolNamespaceConfig] = field(default_factory=list)

    @property
    def mcp_labels(self) -> dict[str, str]:
        return {**self.builtins, **{server.name: server.name for server in self.servers}}


def render_prompt(
    request: Any, history: Sequence[ConversationTurn], options: RenderOptions, encoding: HarmonyEncoding
) -> RenderedPrompt:
    items = request.input_items()
    approval = find_approval(history, items)
    tools = _sort_tools(request, options, {**listed_tools(history, items), **options.mcp_tools})
    known_calls = {call_id: name for turn in history for call_id, name in turn.function_calls.items()}
    converter = InputConverter(
        known_calls, _label_namespaces(options), frozenset(("python", "browser")), stored_approval_ids(history),
        options.unseal,
    )
    new_messages = converter.convert(items)
    replayed = drop_closed_analysis([message for turn in history for message in turn.messages] + new_messages)
    messages = [_system_message(request, options, tools)]
    developer = _developer_message(request, tools)
    if developer is not None:
        messages.append(developer)
    messages += [Message.from_dict(message) for message in replayed]
    conversation, config = Conversation.from_messages(messages), RenderConversationConfig(auto_drop_analysis=False)
    if approval is None:
        token_ids = encoding.render_conversation_for_completion(conversation, Role.ASSISTANT, config)
    else:
        approval = _pending_call(approval, replayed, len(items) - 1)
        token_ids = encoding.render_conversation(conversation, config)
    return RenderedPrompt(token_ids, new_messages, converter.function_calls, tools.mcp_labels, approval)


def _pending_call(approval: ApprovalAnswer, messages: Sequence[dict[str, Any]], index: int) -> ApprovalAnswer:
    """The answered call must be the conversation's last message: the tool's answer comes right after it."""
    last = messages[-1] if messages else {}
    if last.get("role") != "assistant" or not last.get("recipient"):
        raise BadRequest(
            f"The approval request '{approval.approval_request_id}' is not awaiting an answer in this conversation.",
            param=f"input[{index}].approval_request_id",
        )
    return replace(approval, recipient=last["recipient"], channel=last.get("channel"))


def drop_closed_analysis(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop analysis messages that precede the last final answer; keep those of an open chain."""
    last_final = max((i for i, m in enumerate(messages) if m.get("channel") == "final"), default=-1)
    return [m for i, m in enumerate(messages) if i > last_final or m.get("channel") != "analysis"]


def _label_namespaces(options: RenderOptions) -> dict[str, str]:
    return dict(options.builtin_tool_labels)


def _sort_tools(request: Any, options: RenderOptions, mcp_tools: Mapping[str, list[McpToolSpec]]) -> _Tools:
    tools = _Tools()
    if request.tool_choice == "none":
        return tools
    for index, tool in enumerate(request.tools):
        label = getattr(tool, "server_label", None) or tool.type
        namespace = options.builtin_tool_labels.get(label)
        if isinstance(tool, FunctionTool):
            tools.functions.append(ToolDescription.new(tool.name, tool.description or "", tool.parameters))
        elif namespace is not None:
            tools.builtins[namespace] = label
        elif isinstance(tool, Mcp):
            tools.servers.append(_server_namespace(tool, mcp_tools.get(tool.server_label, [])))
        else:
            raise BadRequest(
                f"Invalid value for 'tools[{index}].type': '{tool.type}' is not available on this server.",
                param=f"tools[{index}].type",
                code="unsupported_value",
            )
    return tools


def _server_namespace(tool: Mcp, listed: Sequence[McpToolSpec]) -> ToolNamespaceConfig:
    allowed = _allowed_names(tool)
    descriptions = [
        ToolDescription.new(spec.name, spec.description or "", spec.input_schema)
        for spec in listed
        if allowed is None or spec.name in allowed
    ]
    return ToolNamespaceConfig(name=tool.server_label, description=tool.server_description, tools=descriptions)


def _allowed_names(tool: Mcp) -> set[str] | None:
    allowed = tool.allowed_tools
    if allowed is None:
        return None
    if isinstance(allowed, list):
        return set(allowed)
    return set(allowed.tool_names) if allowed.tool_names is not None else None


def _system_message(request: Any, options: RenderOptions, tools: _Tools) -> Message:
    effort = (request.reasoning.effort if request.reasoning else None) or options.default_reasoning_effort
    content = (
        SystemContent.new()
        .with_reasoning_effort(_EFFORTS[effort])
        .with_conversation_start_date(options.conversation_start_date)
        .with_knowledge_cutoff(options.knowledge_cutoff)
    )
    if "python" in tools.builtins:
        content = content.with_python_tool()
    if "browser" in tools.builtins:
        content = content.with_browser_tool()
    return Message.from_role_and_content(Role.SYSTEM, content)


def _developer_message(request: Any, tools: _Tools) -> Message | None:
    instructions = "\n\n".join(part for part in (request.instructions, _response_format(request)) if part)
    if not instructions and not tools.functions and not tools.servers:
        return None
    content = DeveloperContent.new()
    if instructions:
        content = content.with_instructions(instructions)
    if tools.functions:
        content = content.with_function_tools(tools.functions)
    for server in tools.servers:
        content = content.with_tools(server)
    return Message.from_role_and_content(Role.DEVELOPER, content)


def _response_format(request: Any) -> str | None:
    """gpt-oss reads a requested JSON schema from a "# Response Formats" section."""
    text_format = request.text.format if request.text else None
    if text_format is None or text_format.type == "text":
        return None
    if text_format.type == "json_object":
        return "# Response Formats\n\nRespond with a single JSON object."
    extra = text_format.model_extra or {}
    schema = extra.get("schema", {})
    return f"# Response Formats\n\n## {extra.get('name', 'response')}\n\n{json.dumps(schema, separators=(',', ':'))}"
