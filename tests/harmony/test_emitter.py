"""The emitter: every event's sequence number and type come from it, the type from the openai class."""

from __future__ import annotations

from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseFailedEvent,
    ResponseIncompleteEvent,
    ResponseMcpCallInProgressEvent,
    ResponseTextDeltaEvent,
)

from oss_responses.harmony.emitter import EventEmitter, event_type
from oss_responses.statuses import TERMINAL_EVENT_TYPES


def test_emit_types_event_with_its_class_literal() -> None:
    event = EventEmitter(0).emit(ResponseMcpCallInProgressEvent, item_id="mcp_1", output_index=0)

    assert event.type == "response.mcp_call.in_progress"


def test_emit_numbers_events_consecutively_from_first() -> None:
    emitter = EventEmitter(7)
    for delta in ("a", "b"):
        emitter.emit(ResponseTextDeltaEvent, item_id="msg_1", output_index=0, content_index=0, delta=delta, logprobs=[])

    assert [event.sequence_number for event in emitter.drain()] == [7, 8]  # type: ignore[attr-defined]


def test_terminal_event_types_name_the_terminal_event_classes() -> None:
    classes = (ResponseCompletedEvent, ResponseFailedEvent, ResponseIncompleteEvent)

    assert {event_type(event_class) for event_class in classes} == TERMINAL_EVENT_TYPES
