"""Request + earlier turns → gpt-oss prompt token ids (openai-harmony, HARMONY_GPT_OSS).

Interface::

    plan_conversation(request, history, options) -> ConversationPlan
        every message of the prompt, without tokens; raises BadRequest for any input or tool that
        cannot be rendered (the API calls it before storing a request, the worker through render)
    items_turn(items, stored, options) -> ConversationTurn
        items that come before every turn (a conversation's), as an earlier turn: the history's first
    render_prompt(request, history, options, encoding) -> RenderedPrompt
        .token_ids       prompt ending with "<|start|>assistant", ready for generation
        .new_messages    harmony message dicts this turn adds from its input (store them)
        .function_calls  call_id -> function name for function_call items in this turn's input
        .mcp_labels      harmony namespace -> MCP server_label (give it to ResponseTranslator)
        .function_namespaces  the request's namespace tools (their calls are function calls)
        .prompt_messages the whole input as harmony message dicts (vLLM's enable_response_messages)
        .approval        ApprovalAnswer | None: the input answers an approval request; then
                         token_ids END AFTER THE PENDING CALL (no "<|start|>assistant"): the worker
                         calls translator.open_approved_call / decline_call (+ feed_tool_result) and
                         generates on token_ids + translator.continuation_token_ids()

The prompt is a fresh system message (reasoning effort, dates, built-in tools), a fresh developer
message (instructions, response format, ``functions``, one namespace per ``namespace`` tool and one
per MCP server), then the
earlier turns' stored messages, then this turn's input. Analysis messages that a later final answer
closed are dropped; those of a still-open tool-call chain are kept (gpt-oss's rule).

MCP tool lists: ``RenderOptions.mcp_tools`` holds each server's full list as the server gave it
(listed for this response); a server not listed there is shown the latest list stored in the
conversation (``mcp_list_tools`` items of earlier turns or of this input, see
``history.listed_tools``). Render filters the list by the request's ``allowed_tools``.
``tool_choice`` (``harmony/tool_choice.py``): ``"none"`` renders no tools, ``allowed_tools`` only those
it lists; ``required`` and named choices render like ``auto``, and ``forced_call_header`` is the start
of the call the worker writes for the model.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from openai.types.responses import FunctionTool, NamespaceTool
from openai.types.responses.tool import CodeInterpreter, Mcp
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
from pydantic import BaseModel

from oss_responses.errors import BadRequest
from oss_responses.harmony.builtin_tools import (
    BROWSER,
    BUILTIN_CALL_CHANNEL,
    BUILTIN_NAMESPACES,
    BUILTIN_TOOL_NAMES,
    PYTHON,
    RESERVED_NAMESPACES,
    TOOL_TYPES,
    builtin_of_type,
)
from oss_responses.harmony.history import (
    ApprovalAnswer,
    ConversationTurn,
    find_approval,
    listed_tools,
    stored_approval_ids,
    unanswered_call,
)
from oss_responses.harmony.hosted_items import CODE_INTERPRETER_OUTPUTS, WEB_SEARCH_SOURCES, HostedCalls
from oss_responses.harmony.input_items import FUNCTION_ARGUMENTS_TYPE, InputConverter, Unseal
from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.harmony.messages import FUNCTIONS_NAMESPACE, Recipient
from oss_responses.harmony.token_cost import check_tokenizable, cost_of
from oss_responses.harmony.tool_choice import forced_call, usable_tools
from oss_responses.harmony.truncation import WHOLE, Cut, truncation_cut

__all__ = [
    "JSON_OBJECT_FORMAT",
    "RESPONSE_FORMATS_HEADING",
    "ConversationPlan",
    "ConversationTurn",
    "McpToolSpec",
    "RenderOptions",
    "RenderedPrompt",
    "drop_closed_analysis",
    "hosted_builtins",
    "hosted_calls",
    "items_turn",
    "offered_functions",
    "plan_conversation",
    "render_prompt",
    "rendered_prompt",
    "tokenize_messages",
]

# OpenAI's efforts → gpt-oss's three: the nearest level it has (the Response echoes what was asked).
_EFFORTS = {
    "none": ReasoningEffort.LOW,
    "minimal": ReasoningEffort.LOW,
    "low": ReasoningEffort.LOW,
    "medium": ReasoningEffort.MEDIUM,
    "high": ReasoningEffort.HIGH,
    "xhigh": ReasoningEffort.HIGH,
    "max": ReasoningEffort.HIGH,
}
# The developer message section a requested text.format becomes (engines read it back from the prompt).
RESPONSE_FORMATS_HEADING = "# Response Formats\n\n"
JSON_OBJECT_FORMAT = "Respond with a single JSON object."


@dataclass(slots=True)
class RenderOptions:
    conversation_start_date: str
    knowledge_cutoff: str = "2024-06"
    default_reasoning_effort: str = "medium"
    builtin_tool_labels: Mapping[str, str] = field(default_factory=dict)  # server label -> python | browser
    mcp_tools: Mapping[str, list[McpToolSpec]] = field(default_factory=dict)  # server label -> full tool list
    unseal: Unseal | None = None  # opens reasoning and compaction items' encrypted_content (None: no keys)


@dataclass(slots=True)
class ConversationPlan:
    """Everything render decides before tokenizing; building it raises BadRequest for what cannot render."""

    messages: list[Message]  # system, developer, earlier turns, this turn's input
    new_messages: list[dict[str, Any]]
    function_calls: dict[str, str]
    mcp_labels: dict[str, str]
    function_namespaces: frozenset[str]
    approval: ApprovalAnswer | None = None
    conversation_start: int = 0  # where in ``messages`` the conversation begins (after system, developer)


@dataclass(slots=True)
class RenderedPrompt:
    token_ids: list[int]
    new_messages: list[dict[str, Any]]
    function_calls: dict[str, str]
    mcp_labels: dict[str, str]
    approval: ApprovalAnswer | None = None
    function_namespaces: frozenset[str] = frozenset()
    prompt_messages: list[dict[str, Any]] = field(default_factory=list)  # the model's whole input


@dataclass(slots=True)
class _Tools:
    """The request's tools, sorted into what harmony renders where."""

    builtins: dict[str, str] = field(default_factory=dict)  # namespace (python|browser) -> server label
    functions: list[ToolDescription] = field(default_factory=list)
    servers: list[ToolNamespaceConfig] = field(default_factory=list)
    namespaces: list[ToolNamespaceConfig] = field(default_factory=list)  # the request's namespace tools

    @property
    def mcp_labels(self) -> dict[str, str]:
        return {**self.builtins, **{server.name: server.name for server in self.servers}}

    @property
    def function_namespaces(self) -> frozenset[str]:
        return frozenset(namespace.name for namespace in self.namespaces)


def plan_conversation(
    request: Any, history: Sequence[ConversationTurn], options: RenderOptions, *, cut: Cut = WHOLE
) -> ConversationPlan:
    """The prompt's messages without tokens: what the API checks before it stores a request.

    ``cut``: what the prompt keeps of the conversation (earlier turns and input, after system and
    developer); the rest is dropped (``truncation: "auto"``, ``harmony/truncation.py``)."""
    items = request.input_items()
    approval = find_approval(history, items)
    _check_forced_builtin(request.tool_choice, options.builtin_tool_labels)
    tools = _sort_tools(request, options, {**listed_tools(history, items), **options.mcp_tools})
    known_calls = {call_id: name for turn in history for call_id, name in turn.function_calls.items()}
    converter = InputConverter(
        known_calls, _label_namespaces(options), BUILTIN_NAMESPACES, stored_approval_ids(history), options.unseal
    )
    new_messages = converter.convert(items)
    _check_calls_answered(history, items)
    replayed = drop_closed_analysis([message for turn in history for message in turn.messages] + new_messages)
    _check_json_mentioned(request, replayed)
    messages = [_system_message(request, options, tools)]
    developer = _developer_message(request, tools)
    if developer is not None:
        messages.append(developer)
    conversation_start = len(messages)
    kept = cut.kept(replayed)
    # What this request adds: earlier turns were checked when they came. What tokenizing the whole prompt
    # costs is the tokenizer's to weigh, for the messages it has not kept (prompt_tokenizer.py).
    check_tokenizable(cost_of([message.to_dict() for message in messages]) + cost_of(new_messages))
    messages += [Message.from_dict(message) for message in kept]
    if approval is not None:
        approval = _pending_call(approval, replayed, len(items) - 1)
        _check_server_sent(approval, tools.mcp_labels.values())
    return ConversationPlan(
        messages, new_messages, converter.function_calls, tools.mcp_labels, tools.function_namespaces, approval,
        conversation_start,
    )


def items_turn(
    items: Sequence[BaseModel], stored: Sequence[dict[str, Any]], options: RenderOptions
) -> ConversationTurn:
    """``items`` (parsed; ``stored``: the same as stored JSON) as a turn before every other: a conversation's
    items come before its responses' input, and they are rendered, not stored with each response."""
    converter = InputConverter({}, _label_namespaces(options), BUILTIN_NAMESPACES, frozenset(), options.unseal)
    messages = converter.convert(list(items), live_answer=False)  # nothing in a conversation is answered now
    return ConversationTurn(messages, converter.function_calls, [dict(item) for item in stored])


class Tokenize(Protocol):
    """Prompt messages -> token ids (``PromptTokenizer``'s)."""

    def __call__(self, messages: list[dict[str, Any]], *, for_completion: bool) -> list[int]: ...


def render_prompt(
    request: Any, history: Sequence[ConversationTurn], options: RenderOptions, encoding: HarmonyEncoding,
    budget: int | None = None, *, tokenize: Tokenize | None = None,
) -> RenderedPrompt:
    """The prompt of ``request`` after ``history``; with ``budget`` (``truncation: "auto"``), cut as a
    worker cuts it to leave the answer its room (``harmony/truncation.py``). ``tokenize``: where the
    tokens are computed (a ``PromptTokenizer``'s, off this process for a costly prompt); here by default."""
    def render(cut: Cut) -> tuple[ConversationPlan, RenderedPrompt]:
        plan = plan_conversation(request, history, options, cut=cut)
        prompt_messages = [message.to_dict() for message in plan.messages]
        if tokenize is None:
            token_ids = tokenize_messages(prompt_messages, plan.approval is None, encoding)
        else:
            token_ids = tokenize(prompt_messages, for_completion=plan.approval is None)
        return plan, rendered_prompt(plan, token_ids, prompt_messages)

    plan, rendered = render(WHOLE)
    cut = None if budget is None else truncation_cut(plan.messages, plan.conversation_start, rendered.token_ids, budget)
    return rendered if cut is None or cut == WHOLE else render(cut)[1]


def tokenize_messages(messages: list[dict[str, Any]], for_completion: bool, encoding: HarmonyEncoding) -> list[int]:
    """The prompt's tokens (harmony's Rust renderer, which holds the GIL throughout: see prompt_tokenizer.py).

    ``for_completion``: end with the assistant's turn to write; otherwise (an answered approval) the
    conversation as it is, its last message the pending tool call.
    """
    conversation = Conversation.from_messages([Message.from_dict(message) for message in messages])
    config = RenderConversationConfig(auto_drop_analysis=False)
    if for_completion:
        return list(encoding.render_conversation_for_completion(conversation, Role.ASSISTANT, config))
    return list(encoding.render_conversation(conversation, config))


def rendered_prompt(
    plan: ConversationPlan, token_ids: list[int], prompt_messages: list[dict[str, Any]]
) -> RenderedPrompt:
    return RenderedPrompt(
        token_ids, plan.new_messages, plan.function_calls, plan.mcp_labels, plan.approval,
        plan.function_namespaces, prompt_messages,
    )


def _pending_call(approval: ApprovalAnswer, messages: Sequence[dict[str, Any]], index: int) -> ApprovalAnswer:
    """The answered call must be the conversation's last message: the tool's answer comes right after it."""
    last = messages[-1] if messages else {}
    if last.get("role") != "assistant" or not last.get("recipient"):
        raise BadRequest(
            f"The approval request '{approval.approval_request_id}' is not awaiting an answer in this conversation.",
            param=f"input[{index}].approval_request_id",
        )
    return replace(approval, recipient=last["recipient"], channel=last.get("channel"))


def _check_forced_builtin(choice: Any, builtin_labels: Mapping[str, str]) -> None:
    """A ``tool_choice`` naming a tool of an MCP label served as gpt-oss's built-in ``python`` or
    ``browser`` must name one the built-in has: the model calls the built-in, whatever the server lists."""
    if not isinstance(choice, dict) or choice.get("type") != "mcp" or choice.get("name") is None:
        return
    builtin = builtin_labels.get(str(choice.get("server_label")))
    names = BUILTIN_TOOL_NAMES.get(builtin) if builtin in BUILTIN_NAMESPACES else None
    if names is not None and choice["name"] not in names:
        raise BadRequest(
            f"Invalid value for 'tool_choice.name': the MCP server '{choice['server_label']}' is served as gpt-oss's "
            f"built-in {builtin} tool here, whose tools are {', '.join(repr(n) for n in sorted(names))}.",
            param="tool_choice.name",
        )


def _check_calls_answered(history: Sequence[ConversationTurn], items: Sequence[Any]) -> None:
    """OpenAI's rule: every function call of the conversation has its output before it goes on."""
    call_id = unanswered_call(history, items)
    if call_id is not None:
        raise BadRequest(f"No tool output found for function call {call_id}.", param="input")


def _check_json_mentioned(request: Any, messages: Sequence[dict[str, Any]]) -> None:
    """OpenAI's rule for ``json_object``: the conversation's input messages (not ``instructions``) must
    say "json" somewhere, so that the model is told to write it rather than only made to."""
    text_format = request.text.format if request.text else None
    if text_format is None or text_format.type != "json_object":
        return
    for message in messages:
        if message.get("role") in _INPUT_ROLES and any(
            "json" in str(part.get("text", "")).lower() for part in message.get("content", ()) if isinstance(part, dict)
        ):
            return
    raise BadRequest(
        "Response input messages must contain the word 'json' in some form to use 'text.format' of type "
        "'json_object'.",
        param="input",
    )


_INPUT_ROLES = frozenset({"user", "developer", "system"})


def _check_server_sent(approval: ApprovalAnswer, labels: Collection[str]) -> None:
    """An approved call runs on its server as this request's ``tools`` give it (its URL, credentials):
    a request that approves a call must send that MCP tool again, as OpenAI's approval flow does."""
    if approval.approve and approval.server_label not in labels:
        raise BadRequest(
            f"Invalid value for 'tools': the approved call is to the MCP server '{approval.server_label}', which "
            "'tools' does not name; send its MCP tool again with the approval.",
            param="tools",
        )


def drop_closed_analysis(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop analysis messages that precede the last final answer; keep those of an open chain."""
    last_final = max((i for i, m in enumerate(messages) if m.get("channel") == "final"), default=-1)
    return [m for i, m in enumerate(messages) if i > last_final or m.get("channel") != "analysis"]


def offered_functions(request: Any) -> frozenset[str]:
    """The addresses the model is shown as functions (``ResponseTranslator(offered_functions=...)``):
    ``functions.NAME`` per function tool, ``NAMESPACE.NAME`` per function of a namespace tool, of the
    tools ``tool_choice`` shows (none under ``"none"``).

    It follows ``_sort_tools``' function branches rather than reading the plan: the translator is made
    before the prompt is rendered (tool listings stream first), and from the request alone a takeover
    decides exactly as the lost worker did."""
    addresses: set[str] = set()
    for _, tool in usable_tools(request):
        if isinstance(tool, FunctionTool):
            addresses.add(Recipient.address(FUNCTIONS_NAMESPACE, tool.name))
        elif isinstance(tool, NamespaceTool):
            addresses.update(Recipient.address(tool.name, function.name) for function in tool.tools)
    return frozenset(addresses)


def strict_functions(request: Any) -> dict[str, dict[str, Any]]:
    """The parameters' schema of each function ``offered_functions`` shows whose arguments are to be
    constrained, by address: ``strict: true``, or unset (OpenAI's default: strict where the schema
    allows; the engine leaves a schema it cannot compile unconstrained). ``strict: false`` is free."""
    schemas: dict[str, dict[str, Any]] = {}
    for _, tool in usable_tools(request):
        if isinstance(tool, FunctionTool):
            functions: list[Any] = [(FUNCTIONS_NAMESPACE, tool)]
        elif isinstance(tool, NamespaceTool):
            functions = [(tool.name, function) for function in tool.tools if function.type == "function"]
        else:
            continue
        for namespace, function in functions:
            if function.strict is not False and isinstance(function.parameters, dict):
                schemas[Recipient.address(namespace, function.name)] = function.parameters
    return schemas


def hosted_builtins(request: Any, builtin_labels: Mapping[str, str]) -> frozenset[str]:
    """The built-in namespaces (``browser``, ``python``) the model is shown for a hosted tool type
    (``web_search``, ``code_interpreter``) rather than for an MCP server label
    (``ResponseTranslator(hosted_builtins=...)``). Like ``offered_functions`` it follows ``_sort_tools``
    (the last tool of a built-in wins), so a takeover decides from the request as the lost worker did."""
    hosted: dict[str, bool] = {}
    for _, tool in usable_tools(request):
        if isinstance(tool, Mcp) and tool.server_label in builtin_labels:
            hosted[builtin_labels[tool.server_label]] = False
        elif not isinstance(tool, Mcp) and (builtin := builtin_of_type(tool.type)) is not None:
            hosted[builtin] = True
    return frozenset(builtin for builtin, is_hosted in hosted.items() if is_hosted)


def hosted_calls(request: Any) -> HostedCalls:
    """What the request's hosted tools' items show (``ResponseTranslator(hosted_calls=...)``): the
    container its (last) ``code_interpreter`` tool names, if a string; code outputs and search
    sources if ``include`` asks for them."""
    containers = [tool.container for _, tool in usable_tools(request) if isinstance(tool, CodeInterpreter)]
    named = containers[-1] if containers and isinstance(containers[-1], str) else None
    include = request.include or ()
    return HostedCalls(container_id=named, code_outputs=CODE_INTERPRETER_OUTPUTS in include,
                       search_sources=WEB_SEARCH_SOURCES in include)


def forced_call_header(request: Any, builtin_labels: Mapping[str, str]) -> str | None:
    """The start of the call ``tool_choice`` makes the model write (None: the model decides).
    Harmony has no switch that forces a call; writing the start of its header for the model does,
    as the first tokens of its answer: up to the recipient's namespace when the model picks the tool
    (``to=functions.`` under ``required``, ``to=calc.`` for an MCP server), the whole header for a
    named function or MCP tool, ``to=python`` for code. The model writes no analysis before it.
    ``builtin_labels``: the MCP labels served as ``python``/``browser``."""
    call = forced_call(request, builtin_labels)
    if call is None:
        return None
    if call.namespace == PYTHON:
        return f"<|channel|>{BUILTIN_CALL_CHANNEL} to={PYTHON}"
    channel = BUILTIN_CALL_CHANNEL if call.namespace in BUILTIN_NAMESPACES else "commentary"
    start = f"<|channel|>{channel} to={call.namespace}."
    if call.name is None:
        return start
    return start + (call.name if call.namespace == BROWSER else function_call_header_rest(call.name))


def forced_call_names(
    request: Any, builtin_labels: Mapping[str, str], mcp_tools: Mapping[str, list[McpToolSpec]] | None = None
) -> list[str]:
    """The names the model may finish the header ``forced_call_header`` began with (``to=functions.``
    under ``required``, ``to=calc.`` for an MCP server): the functions shown in its namespace, or the
    server's tools shown (``mcp_tools``: as listed for this response). Empty when the header names its
    tool, when the server has no list, or for a built-in's (``python``'s header is whole, the browser's
    actions are left to the model)."""
    call = forced_call(request, builtin_labels)
    if call is None or call.name is not None:
        return []
    server = next((tool for _, tool in usable_tools(request)
                   if isinstance(tool, Mcp) and tool.server_label == call.namespace), None)
    if server is not None:
        listed = (mcp_tools or {}).get(server.server_label, [])
        return sorted(tool.name for tool in _server_namespace(server, listed).tools)
    prefix = call.namespace + "."
    return sorted(address[len(prefix):] for address in offered_functions(request) if address.startswith(prefix))


def function_call_header_rest(name: str) -> str:
    """A function or MCP tool call's header after ``to=NAMESPACE.``: its name, then the arguments' type."""
    return f"{name} {FUNCTION_ARGUMENTS_TYPE}<|message|>"


def _label_namespaces(options: RenderOptions) -> dict[str, str]:
    """MCP server label → the harmony namespace its calls use (built-in tool types included)."""
    return {**TOOL_TYPES, **options.builtin_tool_labels}


def _sort_tools(request: Any, options: RenderOptions, mcp_tools: Mapping[str, list[McpToolSpec]]) -> _Tools:
    tools = _Tools()
    for index, tool in usable_tools(request):
        param = f"tools[{index}]"
        if isinstance(tool, FunctionTool):
            tools.functions.append(ToolDescription.new(tool.name, tool.description or "", tool.parameters))
        elif isinstance(tool, NamespaceTool):
            tools.namespaces.append(_function_namespace(tool, param))
        elif isinstance(tool, Mcp) and tool.server_label in options.builtin_tool_labels:
            tools.builtins[options.builtin_tool_labels[tool.server_label]] = tool.server_label
        elif isinstance(tool, Mcp):
            tools.servers.append(_server_namespace(tool, mcp_tools.get(tool.server_label, [])))
        elif (builtin := builtin_of_type(tool.type)) is not None:
            tools.builtins[builtin] = tool.type
        else:
            raise BadRequest(
                f"Invalid value for '{param}.type': '{tool.type}' is not available on this server.",
                param=f"{param}.type",
                code="unsupported_value",
            )
    _check_namespaces(tools)
    return tools


def _function_namespace(tool: NamespaceTool, param: str) -> ToolNamespaceConfig:
    """A request's namespace tool: its functions under their own harmony namespace."""
    if tool.name in RESERVED_NAMESPACES:
        raise BadRequest(
            f"Invalid value for '{param}.name': '{tool.name}' is one of gpt-oss's own namespaces "
            f"({', '.join(sorted(RESERVED_NAMESPACES))}).",
            param=f"{param}.name",
        )
    descriptions = []
    for inner, function in enumerate(tool.tools):
        if function.type != "function":
            raise BadRequest(
                f"Invalid value for '{param}.tools[{inner}].type': only function tools can be rendered for gpt-oss.",
                param=f"{param}.tools[{inner}].type",
                code="unsupported_value",
            )
        descriptions.append(ToolDescription.new(function.name, function.description or "", function.parameters))
    return ToolNamespaceConfig(name=tool.name, description=tool.description, tools=descriptions)


def _check_namespaces(tools: _Tools) -> None:
    """Every namespace the model sees names one thing: a call must route to exactly one tool."""
    names = [namespace.name for namespace in tools.namespaces] + [server.name for server in tools.servers]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise BadRequest(
            f"Invalid value for 'tools': the namespace '{duplicate}' is given by two tools.", param="tools"
        )


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
    if PYTHON in tools.builtins:
        content = content.with_python_tool()
    if BROWSER in tools.builtins:
        content = content.with_browser_tool()
    return Message.from_role_and_content(Role.SYSTEM, content)


def _developer_message(request: Any, tools: _Tools) -> Message | None:
    instructions = "\n\n".join(part for part in (request.instructions, _response_format(request)) if part)
    if not instructions and not tools.functions and not tools.servers and not tools.namespaces:
        return None
    content = DeveloperContent.new()
    if instructions:
        content = content.with_instructions(instructions)
    if tools.functions:
        content = content.with_function_tools(tools.functions)
    for namespace in tools.namespaces + tools.servers:
        content = content.with_tools(namespace)
    return Message.from_role_and_content(Role.DEVELOPER, content)


def _response_format(request: Any) -> str | None:
    """gpt-oss reads a requested JSON schema from a "# Response Formats" section."""
    text_format = request.text.format if request.text else None
    if text_format is None or text_format.type == "text":
        return None
    if text_format.type == "json_object":
        return RESPONSE_FORMATS_HEADING + JSON_OBJECT_FORMAT
    extra = text_format.model_extra or {}
    schema = extra.get("schema", {})
    compact = json.dumps(schema, separators=(",", ":"))
    return f"{RESPONSE_FORMATS_HEADING}## {extra.get('name', 'response')}\n\n{compact}"
