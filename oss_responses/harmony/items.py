"""One builder per output-item kind; each owns its item's id, output_index, content and events.

A builder is opened when a harmony message's header is complete, receives the message's text in
deltas, and is closed when the message ends (or is cut). Every event it emits carries its own
``item_id`` and ``output_index``; items with content hold exactly one part, so ``content_index`` is
always 0 (gpt-oss writes one text per message) and can never leak from one item to the next.

- :class:`ReasoningBuilder`   ``analysis``              → ``reasoning`` with ``reasoning_text``
- :class:`MessageBuilder`     ``final`` / preambles     → ``message`` with ``output_text``
- :class:`FunctionCallBuilder` ``functions.NAME``       → ``function_call``
- :class:`McpCallBuilder`     ``LABEL.TOOL`` / built-in → ``mcp_call`` (open until its result; failed, unrun,
  when the message ends with ``<|end|>``: the model went on without it)
- :class:`UnavailableToolCallBuilder` a tool nobody offered → no item; with sealing, its messages are
  carried by the next reasoning item's ``encrypted_content``, or by a :class:`SealedMessagesBuilder` item
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, Literal

from openai.types.responses import (
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseMcpCallArgumentsDeltaEvent,
    ResponseMcpCallArgumentsDoneEvent,
    ResponseMcpCallCompletedEvent,
    ResponseMcpCallFailedEvent,
    ResponseMcpCallInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseReasoningTextDeltaEvent,
    ResponseReasoningTextDoneEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from openai.types.responses.mcp_tool_call_error import McpToolExecutionError
from openai.types.responses.response_content_part_added_event import PartReasoningText as AddedReasoningPart
from openai.types.responses.response_content_part_done_event import PartReasoningText as DoneReasoningPart
from openai.types.responses.response_output_item import McpCall
from openai.types.responses.response_reasoning_item import Content as ReasoningContent
from pydantic import BaseModel

from oss_responses.harmony.emitter import EventEmitter
from oss_responses.harmony.messages import qualified_function_name

ItemStatus = Literal["completed", "incomplete"]
# An item as the added (in_progress) and done events carry it; an MCP call may also end "failed".
LiveStatus = Literal["in_progress", "completed", "incomplete"]
McpCallStatus = Literal["in_progress", "completed", "incomplete", "failed"]


@cache
def _item_fields(event_class: type[BaseModel]) -> tuple[bool, bool]:
    """Whether the event class has ``item_id``, and ``content_index`` (read once: events are per token)."""
    declared = event_class.model_fields
    return "item_id" in declared, "content_index" in declared


class ItemBuilder:
    """Common state: the item's id and position, and the text received so far."""

    id_prefix = "msg"

    def __init__(self, emitter: EventEmitter, output_index: int) -> None:
        self.emitter = emitter
        self.output_index = output_index
        self.item_id = emitter.new_id(self.id_prefix)
        self._chunks: list[str] = []
        self.done_item: BaseModel | None = None

    @property
    def text(self) -> str:
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    @property
    def is_done(self) -> bool:
        return self.done_item is not None

    def open(self) -> None:
        self._emit(ResponseOutputItemAddedEvent, item=self._item("", "in_progress"))

    def append(self, delta: str) -> None:
        self._chunks.append(delta)
        self._emit_delta(delta)

    def end_message(self, status: ItemStatus) -> BaseModel | None:
        """The harmony message ended (``completed``) or was cut (``incomplete``): emit the done events."""
        return self._done(status)

    def abandon(self) -> BaseModel | None:
        """Close the item as incomplete if it is still open (budget or invalid tokens)."""
        return None if self.is_done else self._done("incomplete")

    def _done(self, status: LiveStatus) -> BaseModel:
        text = self.text
        self._emit_text_done(text)
        return self._finish(self._item(text, status))

    def _finish(self, item: BaseModel) -> BaseModel:
        """``output_item.done`` with the item as it ends; the builder is done."""
        self._emit(ResponseOutputItemDoneEvent, item=item)
        self.done_item = item
        return item

    def _emit(self, event_class: type[ResponseStreamEvent], **fields: Any) -> None:
        """An event about this item: its ``output_index``, and its ``item_id`` and ``content_index``
        (always 0: one content part per item) where the event class has them."""
        names_item, has_part = _item_fields(event_class)
        fields["output_index"] = self.output_index
        if names_item:
            fields["item_id"] = self.item_id
        if has_part:
            fields["content_index"] = 0
        self.emitter.emit(event_class, **fields)

    # --- per kind ---------------------------------------------------------
    def _item(self, text: str, status: LiveStatus) -> BaseModel:
        raise NotImplementedError

    def _emit_delta(self, delta: str) -> None:
        raise NotImplementedError

    def _emit_text_done(self, text: str) -> None:
        raise NotImplementedError


class _OnePartBuilder(ItemBuilder):
    """Items whose text lives in one content part (index 0): content_part.added/done around it."""

    def _part(self, text: str, done: bool) -> BaseModel:
        """The content part (each event module declares its own part class)."""
        raise NotImplementedError

    def open(self) -> None:
        super().open()
        self._emit(ResponseContentPartAddedEvent, part=self._part("", False))

    def _emit_text_done(self, text: str) -> None:
        self._emit_part_text_done(text)
        self._emit(ResponseContentPartDoneEvent, part=self._part(text, True))

    def _emit_part_text_done(self, text: str) -> None:
        raise NotImplementedError


class ReasoningBuilder(_OnePartBuilder):
    """With ``seal`` (text → blob), the done item carries ``encrypted_content``: its message, sealed."""

    id_prefix = "rs"

    def __init__(self, emitter: EventEmitter, output_index: int, seal: Callable[[str], str] | None = None) -> None:
        super().__init__(emitter, output_index)
        self._seal = seal

    def _part(self, text: str, done: bool) -> BaseModel:
        return (DoneReasoningPart if done else AddedReasoningPart)(type="reasoning_text", text=text)

    def _item(self, text: str, status: LiveStatus) -> BaseModel:
        if status == "in_progress":
            return ResponseReasoningItem(type="reasoning", id=self.item_id, summary=[], content=[], status=status)
        content = [ReasoningContent(type="reasoning_text", text=text)]
        sealed = self._seal(text) if self._seal is not None else None
        return ResponseReasoningItem(
            type="reasoning", id=self.item_id, summary=[], content=content, encrypted_content=sealed, status=status
        )

    def _emit_delta(self, delta: str) -> None:
        self._emit(ResponseReasoningTextDeltaEvent, delta=delta)

    def _emit_part_text_done(self, text: str) -> None:
        self._emit(ResponseReasoningTextDoneEvent, text=text)


class MessageBuilder(_OnePartBuilder):
    """``final`` → phase ``final_answer``; ``commentary`` without recipient (a preamble) → ``commentary``."""

    def __init__(self, emitter: EventEmitter, output_index: int, phase: Literal["commentary", "final_answer"]) -> None:
        super().__init__(emitter, output_index)
        self.phase = phase

    def _part(self, text: str, done: bool) -> BaseModel:
        return ResponseOutputText(type="output_text", text=text, annotations=[], logprobs=[])

    def _item(self, text: str, status: LiveStatus) -> BaseModel:
        content = [self._part(text, True)] if status != "in_progress" else []
        return ResponseOutputMessage(
            type="message", id=self.item_id, role="assistant", status=status, content=content, phase=self.phase
        )

    def _emit_delta(self, delta: str) -> None:
        self._emit(ResponseTextDeltaEvent, delta=delta, logprobs=[])

    def _emit_part_text_done(self, text: str) -> None:
        self._emit(ResponseTextDoneEvent, text=text, logprobs=[])


class FunctionCallBuilder(ItemBuilder):
    """The call_id is made once here and kept in every later copy of the item.

    ``namespace`` is set for a function of a request's ``namespace`` tool (None for ``functions``).
    """

    id_prefix = "fc"

    def __init__(self, emitter: EventEmitter, output_index: int, name: str, namespace: str | None = None) -> None:
        super().__init__(emitter, output_index)
        self.name = name
        self.namespace = namespace
        self.call_id = emitter.new_id("call")

    @property
    def qualified_name(self) -> str:
        """What a later turn's function_call_output is addressed by: ``name`` or ``namespace.name``."""
        return qualified_function_name(self.namespace, self.name)

    def _item(self, text: str, status: LiveStatus) -> BaseModel:
        return ResponseFunctionToolCall(
            type="function_call", id=self.item_id, call_id=self.call_id, name=self.name, arguments=text,
            status=status, namespace=self.namespace,
        )

    def _emit_delta(self, delta: str) -> None:
        self._emit(ResponseFunctionCallArgumentsDeltaEvent, delta=delta)

    def _emit_text_done(self, text: str) -> None:
        self._emit(ResponseFunctionCallArgumentsDoneEvent, arguments=text)


class QuietBuilder(ItemBuilder):
    """Shows nothing while the model writes the message: its text is only kept (for the item that
    may appear when the message ends, and for the stored harmony message)."""

    def open(self) -> None:
        pass

    def append(self, delta: str) -> None:
        self._chunks.append(delta)


class UnavailableToolCallBuilder(QuietBuilder):
    """A call to a tool the request did not offer: no item (nothing was called); the model is told.

    Its text is kept for the stored harmony message, so the turn replays as the model wrote it.
    """

    def __init__(self, emitter: EventEmitter, recipient: str) -> None:
        super().__init__(emitter, -1)
        self.recipient = recipient

    def end_message(self, status: ItemStatus) -> BaseModel | None:
        return None

    def abandon(self) -> BaseModel | None:
        return None


class SealedMessagesBuilder(ItemBuilder):
    """A reasoning item that shows nothing and carries, sealed, messages of the turn no other item
    stands for (a call to a tool nobody offered and its error), so that a stateless replay renders
    them where they stand. Added and done at once: the messages are whole when it is made."""

    id_prefix = "rs"

    def __init__(self, emitter: EventEmitter, output_index: int, sealed: str) -> None:
        super().__init__(emitter, output_index)
        self._sealed = sealed

    def carry(self) -> BaseModel:
        self.open()
        return self._finish(self._item("", "completed"))

    def _item(self, text: str, status: LiveStatus) -> BaseModel:
        sealed = None if status == "in_progress" else self._sealed
        return ResponseReasoningItem(
            type="reasoning", id=self.item_id, summary=[], content=[], encrypted_content=sealed, status=status
        )


class McpCallBuilder(ItemBuilder):
    """An MCP (or built-in) tool call: arguments stream, then the item waits for the tool's result.

    Order, as OpenAI streams it: added → mcp_call.in_progress → mcp_call_arguments.delta* →
    mcp_call_arguments.done → (result) mcp_call.completed | mcp_call.failed → output_item.done with
    ``output`` or ``error``.
    """

    id_prefix = "mcp"

    def __init__(self, emitter: EventEmitter, output_index: int, server_label: str, name: str) -> None:
        super().__init__(emitter, output_index)
        self.server_label = server_label
        self.name = name
        self.awaiting_result = False

    def open(self) -> None:
        super().open()
        self._emit_in_progress()

    def _emit_in_progress(self) -> None:
        """Added: the call is in progress from then on, its arguments streaming after."""
        self._emit(ResponseMcpCallInProgressEvent)

    def end_message(self, status: ItemStatus) -> BaseModel | None:
        if status != "completed":
            return self._done(status)
        self._emit_text_done(self.text)
        self._emit_running()
        self.awaiting_result = True
        return None

    def _emit_running(self) -> None:
        """The arguments are whole (``<|call|>``): the tool runs (an MCP call has no event for it)."""

    def pass_over(self, error: str) -> BaseModel:
        """The model went on without the result (``<|end|>``): the arguments close, the call fails unrun."""
        self._emit_text_done(self.text)
        return self.fail(error)

    def complete(self, output: str) -> BaseModel:
        self._emit(ResponseMcpCallCompletedEvent)
        return self._finish(self._item(self.text, "completed", output=output))

    def fail(self, error: str) -> BaseModel:
        self._emit(ResponseMcpCallFailedEvent)
        detail = McpToolExecutionError(type="mcp_tool_execution_error", content=[{"type": "text", "text": error}])
        return self._finish(self._item(self.text, "failed", error=detail))

    def _finish(self, item: BaseModel) -> BaseModel:
        self.awaiting_result = False
        return super()._finish(item)

    def _done(self, status: LiveStatus) -> BaseModel:
        if self.awaiting_result:  # arguments already closed; only the item is left
            return self._finish(self._item(self.text, status))
        return super()._done(status)

    def _item(self, text: str, status: McpCallStatus, **result: Any) -> BaseModel:
        return McpCall(
            type="mcp_call", id=self.item_id, server_label=self.server_label, name=self.name, arguments=text,
            status=status, **result,
        )

    def _emit_delta(self, delta: str) -> None:
        self._emit(ResponseMcpCallArgumentsDeltaEvent, delta=delta)

    def _emit_text_done(self, text: str) -> None:
        self._emit(ResponseMcpCallArgumentsDoneEvent, arguments=text)
