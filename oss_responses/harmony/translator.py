"""Tokens → Responses events: one :class:`ResponseTranslator` per response, a pure state machine.

Interface (what the worker calls)::

    opening_events(response) -> list[event]            # the API, at accept time (seq 0, 1)
    t = ResponseTranslator(response, encoding=enc, first_sequence_number=n,
                           mcp_labels={"python": "code_interpreter", "calc": "calc"},
                           input_tokens=len(prompt),
                           approval_required=lambda server_label, tool: ...,  # None: never
                           max_tool_calls=request.max_tool_calls,
                           offered_functions=render.offered_functions(request),  # None: any function
                           hosted_builtins=render.hosted_builtins(request, labels),  # browser -> web_search_call
                           hosted_calls=render.hosted_calls(request),  # their container, outputs, sources
                           seal=messages -> blob)   # None: reasoning items carry no encrypted_content
    t.start()                      -> [response.in_progress]   (once; later calls return [])
    t.list_tools_started(label)    -> events   (mcp_list_tools item added + in_progress)
    t.list_tools_completed(label, tools) / t.list_tools_failed(label, message) -> events
    t.use_prompt(mcp_labels=..., input_tokens=...)   # when the prompt is rendered after the listing
    t.open_approved_call(answer)   -> events   (an approved call from the previous turn: mcp_call
                                                added, arguments.done, in_progress; then feed_tool_result)
    t.decline_call(answer)         -> []       (tells the model the user declined; then continue)
    t.feed(token_ids)              -> events (chunks of any size; deltas are coalesced per chunk)
    t.pending_tool_call            -> PendingToolCall | None   (set when the model stopped after a message
                                      to a tool; kind "unavailable": a tool nobody offered, answer with an
                                      error; a call it wrote past with <|end|> is not run: failed at once.
                                      An unavailable call and its error have no item: with ``seal``, the
                                      next reasoning item's encrypted_content carries them before its
                                      analysis, or a reasoning item of their own, added before the next
                                      other item or the end, so a stateless replay renders them)
    t.pending_approval             -> PendingApproval | None   (the call ended as an approval request)
    t.tool_limit_reached           -> bool   (a call beyond max_tool_calls was refused: end the turn)
    t.feed_tool_result(output, error) -> events   (MCP: completes/fails the call's item)
    t.continuation_token_ids()     -> tool message + "<|start|>assistant" to append before generating on
    t.finish("stop" | "length" | "abort", cached_tokens=None, input_tokens=None) -> events (the one terminal event)
    t.fail(message, code="server_error") -> events
    t.halted                       -> bool   (nothing more is translated: stop the engine, then finish)
    t.response, t.output_messages, t.function_calls, t.next_sequence_number
    t.sealing_plan                 -> which of output_messages each reasoning item's encrypted_content seals,
                                      with ``seal`` or without (see the property): kept with the turn, so that
                                      a retrieve with ``include`` seals what the turn with ``include`` did

The harmony ``StreamableParser`` does the parsing; this class only watches three token kinds: a
header end (``<|message|>``) opens an item builder chosen from channel and recipient (see
``items.py``), content tokens feed the open builder, and ``<|end|>``/``<|call|>``/``<|return|>``
close it. Nothing raises out of ``feed``/``finish``/``fail``: invalid harmony fails the response, once
the generation ended (``halted`` tells the worker to stop it), so that usage counts every token generated.
``finish("abort")`` closes open items and sets status ``cancelled`` without a terminal event,
because OpenAI defines none for cancellation.

MCP tool turns:

- A call to a tool for which ``approval_required(server_label, tool)`` is true is not streamed: its
  arguments are buffered and at ``<|call|>`` an ``mcp_approval_request`` item appears;
  ``pending_approval`` is set, ``pending_tool_call`` is not, so the worker finishes ("stop" →
  completed). The call message is in ``output_messages`` (stored); the item is in the Response.
- The next response answers it (``history.find_approval`` → ``RenderedPrompt.approval``, whose
  prompt ends after the pending call): approved → ``open_approved_call`` (an mcp_call with
  ``approval_request_id``), run the tool, ``feed_tool_result``; declined → ``decline_call``: no item
  (OpenAI shows none), the model reads a tool message saying the user declined. Either way the
  worker appends ``continuation_token_ids()`` to the prompt and generates.
- ``max_tool_calls`` counts the MCP calls run in this response. A call beyond it still streams as an
  mcp_call (its header came before we could know) but is not run: it fails at once with an error
  saying so, the model's tool message says the same (so the stored turn replays as valid harmony),
  no call is pending, and ``tool_limit_reached`` is true: the worker ends the response (completed).
  OpenAI says further calls are "ignored"; ending the turn is what guarantees no loop.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from openai.types.responses import Response, ResponseError, ResponseStreamEvent
from openai_harmony import HarmonyEncoding, HarmonyError, Message, Role, StreamableParser

from oss_responses.harmony import lifecycle
from oss_responses.harmony.builtin_tools import BROWSER, PYTHON
from oss_responses.harmony.emitter import EventEmitter
from oss_responses.harmony.history import ApprovalAnswer
from oss_responses.harmony.hosted_items import (
    DEFAULT_HOSTED_CALLS,
    CodeInterpreterCallBuilder,
    HostedCalls,
    WebSearchCallBuilder,
)
from oss_responses.harmony.items import (
    FunctionCallBuilder,
    ItemBuilder,
    McpCallBuilder,
    MessageBuilder,
    ReasoningBuilder,
    SealedMessagesBuilder,
    UnavailableToolCallBuilder,
)
from oss_responses.harmony.mcp_items import ApprovalRequestBuilder, ApprovedCallBuilder, ListToolsBuilder
from oss_responses.harmony.messages import (
    FUNCTIONS_NAMESPACE,
    Recipient,
    declined_message,
    text_message,
    tool_result_message,
)
from oss_responses.statuses import FinishReason, TerminalStatus

MESSAGE_TOKEN = 200008  # <|message|>: the header is complete, channel and recipient are known
END_TOKEN, START_TOKEN, CHANNEL_TOKEN = 200007, 200006, 200005  # <|end|>, <|start|>, <|channel|>
CALL_TOKEN, RETURN_TOKEN = 200012, 200002  # <|call|>, <|return|>
END_TOKENS = frozenset({END_TOKEN, CALL_TOKEN, RETURN_TOKEN})
END_OF_TEXT = 199999  # <|endoftext|>: vLLM stops on it too (the generation config's EOS), as the last token
GENERATION_ENDS = frozenset({CALL_TOKEN, RETURN_TOKEN, END_OF_TEXT})  # the tokens an engine stops on
FIRST_SPECIAL = 199998  # o200k's special tokens (harmony's included) are the ids from here on
# Special token text (harmony's parser keeps a stray one of a header as the recipient's or channel's text).
_MARKUP = re.compile(r"<\|[a-z0-9_]+\|>")
ASSISTANT_START = "<|start|>assistant"
UNAVAILABLE = "There is no tool '{recipient}' in this conversation; use only the tools you were given."
NOT_AWAITED = (
    "The call was not run: the model went on without waiting for its result "
    "(the message ended with <|end|>, not <|call|>)."
)

ApprovalPolicy = Callable[[str, str], bool]  # (server_label, tool name) -> needs approval


class InvalidHarmony(Exception):
    """Tokens that parse but cannot be translated."""


@dataclass(frozen=True, slots=True)
class PendingToolCall:
    """A tool call the model is waiting on. ``call_id`` is set for function calls only.

    ``unavailable``: the model called a tool the request did not offer; nothing runs, the worker
    answers with :data:`UNAVAILABLE` (``feed_tool_result(None, error)``) and generation goes on.
    """

    kind: Literal["mcp", "function", "unavailable"]
    server_label: str | None
    name: str
    arguments: str
    item_id: str
    call_id: str | None
    recipient: str
    channel: str | None = None  # of the call message; the tool's answer uses the same


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A call waiting for the user's approval: what the ``mcp_approval_request`` item holds."""

    approval_request_id: str
    server_label: str
    name: str
    arguments: str
    recipient: str


@dataclass(slots=True)
class _SealedSpan:
    """The messages (indices into ``output_messages``) one reasoning item seals: ``builder``'s, or, with no
    item (no ``seal``), those a carrier would hold at ``position`` among the items."""

    messages: list[int]
    builder: ItemBuilder | None = None
    position: int = 0


@dataclass(frozen=True, slots=True)
class _Header:
    channel: str | None
    recipient: str | None
    content_type: str | None
    start: int  # output-token position of the message's first header token


class ResponseTranslator:
    def __init__(
        self,
        response: Response,
        *,
        encoding: HarmonyEncoding,
        first_sequence_number: int,
        mcp_labels: Mapping[str, str] | None = None,
        input_tokens: int = 0,
        approval_required: ApprovalPolicy | None = None,
        max_tool_calls: int | None = None,
        function_namespaces: frozenset[str] = frozenset(),
        offered_functions: frozenset[str] | None = None,
        hosted_builtins: frozenset[str] = frozenset(),
        hosted_calls: HostedCalls = DEFAULT_HOSTED_CALLS,
        seal: Callable[[list[dict[str, Any]]], str] | None = None,
        id_seed: str | None = None,
    ) -> None:
        """``id_seed``: name items reproducibly (a replay of the same calls then yields the same events).

        ``offered_functions``: the addresses (``functions.get_weather``, ``namespace.tool``) the request
        offers as functions (``render.offered_functions``); a call to any other address in ``functions``
        or a function namespace is unavailable. None: no request to check against (the translator
        alone), every such call is a function call.

        ``hosted_builtins``: the built-in namespaces a hosted tool type serves (``render.hosted_builtins``):
        a ``browser`` call then streams as a ``web_search_call``, a ``python`` call as a
        ``code_interpreter_call`` (showing what ``hosted_calls`` says), not as an ``mcp_call``.
        """
        self.response = response
        self._seal = seal
        self.output_messages: list[dict[str, Any]] = []
        # Messages no item stands for (a call to a tool nobody offered, its answer), by index in
        # output_messages, not yet given to an item: the next reasoning item, or an item of their own, carries
        # them (sealed with ``seal``; without it, only in the plan, ``sealing_plan``).
        self._unshown: list[int] = []
        self._spans: list[_SealedSpan] = []
        self.function_calls: dict[str, str] = {}
        self.pending_tool_call: PendingToolCall | None = None
        self.pending_approval: PendingApproval | None = None
        self.tool_limit_reached = False
        self._approval_required = approval_required
        self._max_tool_calls = max_tool_calls
        self._mcp_calls = 0
        self._refused: McpCallBuilder | None = None
        self._listings: dict[str, ListToolsBuilder] = {}
        self._started = False
        self._encoding = encoding
        self._emitter = EventEmitter(first_sequence_number, id_seed)
        self._mcp_labels = dict(mcp_labels or {})
        self._function_namespaces = function_namespaces  # namespace tools: their calls are function calls
        self._offered_functions = offered_functions
        self._hosted_builtins = hosted_builtins
        self._hosted_calls = hosted_calls
        self._container_id = hosted_calls.container_id  # "auto": made at the first call (a seeded id)
        self._input_tokens = input_tokens
        self._output_tokens = 0
        self._reasoning_tokens = 0
        self._items: list[ItemBuilder] = []
        self._current: ItemBuilder | None = None
        self._header: _Header | None = None
        self._message_start = 0
        self._buffer: list[str] = []
        self._awaiting: McpCallBuilder | None = None
        self._terminal = False
        self._invalid: ResponseError | None = None  # the output was invalid: the failure stated at its end
        self._completed_at: int | None = None
        self._parser = self._new_parser()

    # --- public ----------------------------------------------------------
    @property
    def next_sequence_number(self) -> int:
        return self._emitter.next_sequence_number

    @property
    def sealing_plan(self) -> list[dict[str, Any]]:
        """Which of ``output_messages`` (indices, in order) each reasoning item's ``encrypted_content`` seals
        (or, without ``seal``, would seal), in output order: ``{"item": id, "messages": [...]}`` for an item of
        the output; ``{"before": id, "messages": [...]}`` for a reasoning item of their own carrying messages
        no item shows, which only a turn with ``seal`` adds: it stands before that item (``None``: last).
        With it, a stored turn retrieved with ``include`` seals exactly what the same turn sealed with
        ``include`` would carry, so a stateless replay of either renders the chained turn's prompt."""
        plan: list[dict[str, Any]] = []
        for span in self._spans:
            if span.builder is not None:
                plan.append({"item": span.builder.item_id, "messages": list(span.messages)})
            else:
                before = self._items[span.position].item_id if span.position < len(self._items) else None
                plan.append({"before": before, "messages": list(span.messages)})
        return plan

    @property
    def halted(self) -> bool:
        """Nothing more is translated (the response ended, or the model's output was invalid): stop generating."""
        return self._terminal or self._invalid is not None

    def start(self) -> list[ResponseStreamEvent]:
        if self._started:
            return []
        self._started = True
        self.response = lifecycle.emit_in_progress(self._emitter, self.response)
        return self._emitter.drain()

    def use_prompt(
        self, *, mcp_labels: Mapping[str, str], input_tokens: int, function_namespaces: frozenset[str] = frozenset()
    ) -> None:
        """The rendered prompt's facts, when the translator was made before rendering (to list tools)."""
        self._mcp_labels = dict(mcp_labels)
        self._function_namespaces = function_namespaces
        self._input_tokens = input_tokens

    # --- MCP tool lists (before generation) ---------------------------------
    def list_tools_started(self, server_label: str) -> list[ResponseStreamEvent]:
        if self._terminal:
            return []
        builder = ListToolsBuilder(self._emitter, len(self._items), server_label)
        self._items.append(builder)
        self._listings[server_label] = builder
        builder.open()
        return self._emitter.drain()

    def list_tools_completed(self, server_label: str, tools: Sequence[Any]) -> list[ResponseStreamEvent]:
        """``tools``: McpToolSpec-like objects (name, description, input_schema, annotations)."""
        builder = self._listing(server_label)
        if builder is not None:
            builder.complete(tools)
        return self._emitter.drain()

    def list_tools_failed(self, server_label: str, message: str) -> list[ResponseStreamEvent]:
        builder = self._listing(server_label)
        if builder is not None:
            builder.fail(message)
        return self._emitter.drain()

    # --- approvals answered in this response ---------------------------------
    def open_approved_call(self, answer: ApprovalAnswer) -> list[ResponseStreamEvent]:
        """Open the approved call as an mcp_call item; the worker runs it and calls feed_tool_result."""
        if self._terminal:
            return []
        builder = ApprovedCallBuilder(
            self._emitter, len(self._items), answer.server_label, answer.name, answer.arguments,
            answer.approval_request_id,
        )
        self._items.append(builder)
        builder.open()
        self._mcp_calls += 1
        self._awaiting = builder
        self.pending_tool_call = PendingToolCall(
            "mcp", answer.server_label, answer.name, answer.arguments, builder.item_id, None, _recipient(answer),
            answer.channel,
        )
        return self._emitter.drain()

    def decline_call(self, answer: ApprovalAnswer) -> list[ResponseStreamEvent]:
        """The user declined: no item; the model reads so in a tool message (continuation_token_ids)."""
        self.output_messages.append(declined_message(_recipient(answer), answer.reason, answer.channel))
        return []

    def feed(self, token_ids: Sequence[int]) -> list[ResponseStreamEvent]:
        if self._terminal:
            return []
        if self._invalid is not None:  # counted, not translated: usage holds every token generated
            self._output_tokens += len(token_ids)
            return []
        end = self._output_tokens + len(token_ids)
        try:
            self._consume(token_ids)
        except (HarmonyError, InvalidHarmony) as exc:
            self._reject(f"The model's output is not valid harmony: {exc}", end)
        return self._emitter.drain()

    def feed_tool_result(self, output: str | None, error: str | None = None) -> list[ResponseStreamEvent]:
        """The pending call's result: ``output`` on success, ``error`` (a message) on failure."""
        call = self.pending_tool_call
        if call is None or self._terminal:
            return []
        if self._awaiting is not None:
            self._awaiting.fail(error) if error is not None else self._awaiting.complete(output or "")
            self._awaiting = None
        text = error if error is not None else (output or "")
        answer = tool_result_message(call.recipient, text, call.channel)
        self.output_messages.append(answer)
        if call.kind == "unavailable":
            self._keep_unshown()
        self.pending_tool_call = None
        self._parser = self._new_parser()
        return self._emitter.drain()

    def continuation_token_ids(self) -> list[int]:
        """The last tool message, rendered, then the next assistant start; counted as input tokens."""
        tool_message = Message.from_dict(self.output_messages[-1])
        tokens: list[int] = self._encoding.render(tool_message)
        tokens += self._encoding.encode(ASSISTANT_START, allowed_special="all")
        self._input_tokens += len(tokens)
        return tokens

    def finish(
        self,
        reason: FinishReason,
        *,
        cached_tokens: int | None = None,
        input_tokens: int | None = None,
        completed_at: int | None = None,
    ) -> list[ResponseStreamEvent]:
        """``input_tokens``: the caller's count over all engine calls (default: prompt + continuations).

        ``completed_at``: the completion time to state (default: now), so that a replay states it alike.
        """
        if self._terminal:
            return []
        if input_tokens is not None:
            self._input_tokens = input_tokens
        self._flush()
        self._completed_at = completed_at
        if self._invalid is not None and reason != "abort":
            self._terminate("failed", self._invalid, cached_tokens=cached_tokens)
        elif reason == "length":
            self._terminate("incomplete", cached_tokens=cached_tokens)
        elif reason == "abort":
            self._terminate("cancelled", cached_tokens=cached_tokens)
        else:
            self._stop(cached_tokens)
        return self._emitter.drain()

    def fail(self, message: str, code: str = "server_error") -> list[ResponseStreamEvent]:
        if self._terminal:
            return []
        self._flush()
        # The engine stopped because the worker aborted it on invalid output: that is the cause to state.
        self._terminate("failed", self._invalid or lifecycle.response_error(code, message))
        return self._emitter.drain()

    # --- tokens ----------------------------------------------------------
    def _listing(self, server_label: str) -> ListToolsBuilder | None:
        if self._terminal:
            return None
        builder = self._listings.pop(server_label, None)
        if builder is None:
            raise ValueError(f"no tool listing of {server_label!r} is open (call list_tools_started first)")
        return builder

    def _new_parser(self) -> Any:
        # The raw binding: its properties are plain attribute reads, without the wrapper's JSON work.
        self._message_start = self._output_tokens
        return StreamableParser(self._encoding, Role.ASSISTANT)._inner

    def _consume(self, token_ids: Sequence[int]) -> None:
        parser = self._parser
        process = parser.process
        buffer = self._buffer
        current = self._current
        base = self._output_tokens
        for position, token in enumerate(token_ids, base):
            self._output_tokens = position + 1
            if current is not None:
                if token >= FIRST_SPECIAL and token not in END_TOKENS:
                    current = self._markup_in_message(token, position)
                    continue
            elif token in GENERATION_ENDS and position == self._message_start:
                self._message_start = position + 1  # the generation ended where a message would begin
                continue
            process(token)
            if current is not None:
                if token in END_TOKENS:
                    self._flush()
                    self._end_message(position, waits=token != END_TOKEN)
                    current = None
                else:
                    delta = parser.last_content_delta
                    if delta:
                        buffer.append(delta)
            elif token == MESSAGE_TOKEN:
                current = self._begin_message(parser)
        self._output_tokens = base + len(token_ids)
        self._flush()

    def _reject(self, message: str, end: int) -> None:
        """Invalid output: nothing after it is translated and no call waits. The failure is stated when the
        generation ends (``finish``, or ``fail`` once the worker aborted the engine), so that usage counts every
        token the engine generated, the rest of this output and any after it, however it was chunked."""
        self._flush()
        self._output_tokens = end
        self._invalid = lifecycle.response_error("server_error", message)
        self.pending_tool_call = self.pending_approval = None

    def _markup_in_message(self, token: int, position: int) -> ItemBuilder | None:
        """A special token inside a message's text is markup the model misplaced, never text (harmony's
        parser would hand it over as text: ``<|channel|>`` in an output_text, a function's arguments).

        ``<|channel|>`` or ``<|start|>``: the model began its next message without ending this one
        (gpt-oss may drop ``<|end|><|start|>assistant`` before its answer); the message ends there and
        the next one begins, as if they had been written. ``<|endoftext|>``: the end of generation, not
        text. Any other is invalid harmony.
        """
        if token == END_OF_TEXT:
            return self._current
        if token not in (CHANNEL_TOKEN, START_TOKEN):
            raise InvalidHarmony(f"{self._encoding.decode([token])} inside a message")
        self._flush()
        self._parser.process(END_TOKEN)
        self._end_message(position - 1, waits=False)
        implied = [START_TOKEN] if token == START_TOKEN else self._encoding.encode(ASSISTANT_START + "<|channel|>",
                                                                                    allowed_special="all")
        for implied_token in implied:
            self._parser.process(implied_token)
        return None

    def _flush(self) -> None:
        if self._buffer and self._current is not None:
            self._current.append("".join(self._buffer))
        self._buffer.clear()

    def _begin_message(self, parser: Any) -> ItemBuilder:
        header = _Header(
            parser.current_channel, parser.current_recipient, parser.current_content_type, self._message_start
        )
        _check_header(header)
        builder = self._builder_for(header)
        builder.open()
        self._header, self._current = header, builder
        if not isinstance(builder, UnavailableToolCallBuilder):  # it has no item, hence no output_index
            self._items.append(builder)
        return builder

    def _is_function(self, target: Recipient) -> bool:
        return target.namespace == FUNCTIONS_NAMESPACE or target.namespace in self._function_namespaces

    def _is_unavailable(self, target: Recipient) -> bool:
        """A call to a tool nobody offered gets no item. A function the client did not offer: the client
        could not run it (the Agents SDK fails the whole run on an unknown tool), and ``tool_choice="none"``
        promises no call. Any other namespace that is no MCP server's or built-in's of this request."""
        if self._is_function(target):
            offered = self._offered_functions
            return offered is not None and Recipient.address(target.namespace, target.tool) not in offered
        return target.namespace not in self._mcp_labels

    def _builder_for(self, header: _Header) -> ItemBuilder:
        if header.recipient is None:
            if header.channel == "analysis":  # it carries the messages no item showed before it
                return self._reasoning_builder(header)
            phase: Literal["commentary", "final_answer"] = (
                "commentary" if header.channel == "commentary" else "final_answer"
            )
            return MessageBuilder(self._emitter, self._next_index(), phase)
        target = Recipient.parse(header.recipient)
        if self._is_unavailable(target):
            return UnavailableToolCallBuilder(self._emitter, header.recipient)
        index = self._next_index()
        if self._is_function(target):
            namespace = None if target.namespace == FUNCTIONS_NAMESPACE else target.namespace
            return FunctionCallBuilder(self._emitter, index, target.tool, namespace=namespace)
        label = self._mcp_labels[target.namespace]
        if self._max_tool_calls is not None and self._mcp_calls >= self._max_tool_calls:
            self._refused = self._call_builder(index, label, target)
            return self._refused
        if self._approval_required is not None and self._approval_required(label, target.tool):
            return ApprovalRequestBuilder(self._emitter, index, label, target.tool)
        self._mcp_calls += 1
        return self._call_builder(index, label, target)

    def _call_builder(self, index: int, label: str, target: Recipient) -> McpCallBuilder:
        """An ``mcp_call``, or the item of the hosted tool type the built-in serves."""
        hosted = target.namespace in self._hosted_builtins
        if hosted and target.namespace == BROWSER:
            return WebSearchCallBuilder(self._emitter, index, label, target.tool,
                                        show_sources=self._hosted_calls.search_sources)
        if hosted and target.namespace == PYTHON:
            if self._container_id is None:
                self._container_id = self._emitter.new_id("cntr")
            return CodeInterpreterCallBuilder(self._emitter, index, label, target.tool, container_id=self._container_id,
                                              show_outputs=self._hosted_calls.code_outputs)
        return McpCallBuilder(self._emitter, index, label, target.tool)

    def _end_message(self, position: int, *, waits: bool = True) -> None:
        """``waits``: the model stopped after the message (``<|call|>``, ``<|return|>``, the end of generation),
        rather than going on (``<|end|>``, or its next message begun)."""
        builder, header = self._current, self._header
        assert builder is not None and header is not None
        self._current = None
        passed = not waits and self._answered_here(builder)
        if not passed:
            builder.end_message("completed")
        self._record_message(builder, header)
        self._message_start = position + 1
        if header.channel == "analysis":
            self._reasoning_tokens += position + 1 - header.start
        if passed:
            self._pass_over(builder, header)
        elif header.recipient is not None:
            self._set_pending(builder, header)

    def _answered_here(self, builder: ItemBuilder) -> bool:
        """A call this response answers itself when the model writes past it: a tool it runs (MCP, built-in),
        one nobody offered, or one needing approval (no request can await the user once the model went on:
        the next turn's answer would find the call followed by more output). A function's call is the
        client's to run, a refused call is refused."""
        answered = (McpCallBuilder, UnavailableToolCallBuilder, ApprovalRequestBuilder)
        return isinstance(builder, answered) and builder is not self._refused

    def _pass_over(self, builder: ItemBuilder, header: _Header) -> None:
        """A call the model wrote past: harmony's ``<|call|>`` is the stop token that asks for a tool's result,
        ``<|end|>`` only ends a message, and the model went on without the result. It is not run (as gpt-oss's
        and vLLM's Responses servers run a tool only once generation stopped after its call): its item ends
        failed now, before the next item is added (a call needing approval shows none), and the stored turn
        answers it, so that it replays as valid harmony (harmony renders every call with ``<|call|>``) and the
        next turn knows it was not run."""
        recipient = header.recipient or ""
        if isinstance(builder, McpCallBuilder):
            builder.pass_over(NOT_AWAITED)
            self._mcp_calls -= 1  # max_tool_calls counts the calls run
            answer = NOT_AWAITED
        elif isinstance(builder, ApprovalRequestBuilder):
            self._items.remove(builder)  # never shown (its item appears only at <|call|>): its index is the next's
            self._keep_unshown()  # its call, just stored: no item stands for it now
            answer = NOT_AWAITED
        else:
            answer = UNAVAILABLE.format(recipient=recipient)
        message = tool_result_message(recipient, answer, header.channel)
        self.output_messages.append(message)
        if isinstance(builder, UnavailableToolCallBuilder | ApprovalRequestBuilder):
            self._keep_unshown()

    def _reasoning_builder(self, header: _Header) -> ReasoningBuilder:
        """A reasoning item carries the messages no item showed before it (taken now), then its own: its seal
        is exactly those messages and the one ``_record_message`` stores for it, so a replay renders the same
        tokens; its span in the plan is the same messages (its own added when stored)."""
        carried, self._unshown = self._unshown, []
        builder = ReasoningBuilder(self._emitter, len(self._items), self._reasoning_seal(header, carried))
        self._spans.append(_SealedSpan(carried, builder))
        return builder

    def _reasoning_seal(self, header: _Header, carried: list[int]) -> Callable[[str], str] | None:
        seal = self._seal
        if seal is None:
            return None
        before = [self.output_messages[index] for index in carried]
        return lambda text: seal([*before, _message_of(text, header)])

    def _keep_unshown(self) -> None:
        """The message just stored has no item: a later item's ``encrypted_content`` is to carry it, or a
        stateless replay (``store: false``) would render a prompt without it."""
        self._unshown.append(len(self.output_messages) - 1)

    def _next_index(self) -> int:
        """The output_index of an item opening now that is no reasoning item (which would carry them itself):
        after the item carrying the messages none showed."""
        self._carry_unshown()
        return len(self._items)

    def _carry_unshown(self) -> None:
        """The messages no item showed, sealed in a reasoning item of their own (added and done at once).
        Without ``seal`` there is no such item (nothing to carry): the plan keeps where it would stand."""
        if not self._unshown:
            return
        carried, self._unshown = self._unshown, []
        if self._seal is None:
            self._spans.append(_SealedSpan(carried, position=len(self._items)))
            return
        carrier = SealedMessagesBuilder(self._emitter, len(self._items),
                                        self._seal([self.output_messages[index] for index in carried]))
        self._items.append(carrier)
        self._spans.append(_SealedSpan(carried, carrier))
        carrier.carry()

    def _record_message(self, builder: ItemBuilder, header: _Header) -> None:
        message = _message_of(builder.text, header)
        self.output_messages.append(message)
        if isinstance(builder, UnavailableToolCallBuilder):
            self._keep_unshown()
        elif isinstance(builder, ReasoningBuilder):  # its own message, sealed after those it carries
            next(span for span in reversed(self._spans) if span.builder is builder).messages.append(
                len(self.output_messages) - 1)

    def _set_pending(self, builder: ItemBuilder, header: _Header) -> None:
        recipient, channel = header.recipient or "", header.channel
        if isinstance(builder, FunctionCallBuilder):
            self.function_calls[builder.call_id] = builder.qualified_name
            self.pending_tool_call = PendingToolCall(
                "function", None, builder.name, builder.text, builder.item_id, builder.call_id, recipient, channel
            )
        elif isinstance(builder, ApprovalRequestBuilder):
            self.pending_approval = PendingApproval(
                builder.item_id, builder.server_label, builder.name, builder.text, recipient
            )
        elif builder is self._refused:
            self._refuse(builder, recipient, channel)
        elif isinstance(builder, UnavailableToolCallBuilder):
            self.pending_tool_call = PendingToolCall(
                "unavailable", None, recipient, builder.text, builder.item_id, None, recipient, channel
            )
        elif isinstance(builder, McpCallBuilder):
            self._awaiting = builder
            self.pending_tool_call = PendingToolCall(
                "mcp", builder.server_label, builder.name, builder.text, builder.item_id, None, recipient, channel
            )

    def _refuse(self, builder: McpCallBuilder, recipient: str, channel: str | None) -> None:
        """A call beyond max_tool_calls: failed without running; the turn ends (no pending call)."""
        message = (
            f"This response reached its limit of {self._max_tool_calls} tool calls (max_tool_calls); "
            "the call was not run."
        )
        builder.fail(message)
        self.output_messages.append(tool_result_message(recipient, message, channel))
        self.tool_limit_reached = True

    # --- endings ---------------------------------------------------------
    def _stop(self, cached_tokens: int | None) -> None:
        """Generation stopped on its own: an unterminated message is closed if harmony allows it.

        Stopped where a message would begin (at once, or after a whole message), the model wrote no more:
        the response completes with what it has, even nothing, as OpenAI's, gpt-oss's and vLLM's do
        (harmony's parser calls an end before any header invalid)."""
        try:
            if self._message_start < self._output_tokens:  # a message or its header begun since
                self._parser.process_eos()
        except HarmonyError as exc:
            error = lifecycle.response_error("server_error", f"The model's output is not valid harmony: {exc}")
            self._terminate("failed", error, cached_tokens=cached_tokens)
            return
        if self._current is not None:
            self._end_message(self._output_tokens - 1)
        self._terminate("completed", cached_tokens=cached_tokens)

    def _terminate(
        self, status: TerminalStatus, error: ResponseError | None = None, *, cached_tokens: int | None = None
    ) -> None:
        if self._current is not None and self._header is not None:
            self._record_message(self._current, self._header)
            if self._header.channel == "analysis":  # cut short while reasoning: its tokens count as such
                self._reasoning_tokens += self._output_tokens - self._header.start
            if isinstance(self._current, FunctionCallBuilder):  # in the conversation: an output may answer it
                self.function_calls[self._current.call_id] = self._current.qualified_name
        for builder in self._items:
            builder.abandon()
        self._carry_unshown()  # nothing comes after them to carry them
        self._current = self._awaiting = None
        self._terminal = True
        usage = lifecycle.usage(self._input_tokens, cached_tokens, self._output_tokens, self._reasoning_tokens)
        output = [builder.done_item for builder in self._items if builder.done_item is not None]
        self.response = lifecycle.terminal_response(
            self.response, status, output, usage, error=error, completed_at=self._completed_at
        )
        lifecycle.emit_terminal(self._emitter, self.response)


def _check_header(header: _Header) -> None:
    """A header whose channel, recipient or content type holds special tokens (other than the type's
    ``<|constrain|>``) is invalid harmony: a stray ``<|channel|>`` would name a tool, ``<|start|>``
    hide an answer as a call to no tool."""
    content_type = (header.content_type or "").removeprefix("<|constrain|>")
    for value in (header.channel, header.recipient, content_type):
        if value and _MARKUP.search(value):
            raise InvalidHarmony(f"special tokens in a message header: {value!r}")


def _message_of(text: str, header: _Header) -> dict[str, Any]:
    return text_message(
        "assistant", text, channel=header.channel, recipient=header.recipient, content_type=header.content_type
    )


def _recipient(answer: ApprovalAnswer) -> str:
    return answer.recipient or f"{answer.server_label}.{answer.name}"


def opening_events(response: Response) -> list[ResponseStreamEvent]:
    """``response.created`` (seq 0) and, for background responses, ``response.queued`` (seq 1)."""
    return lifecycle.opening_events(response)
