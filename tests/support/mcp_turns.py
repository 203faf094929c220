"""Helpers for the MCP tests: a translator over hand-written harmony, and the stream checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from openai_harmony import HarmonyEncoding
from pydantic import BaseModel, TypeAdapter

from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.harmony.translator import ResponseTranslator, opening_events
from support.harmony_transcripts import make_response
from support.sdk import without_parsed

LABELS = {"python": "code_interpreter", "calc": "calc"}
CALC_TOOLS = [
    McpToolSpec("add", "Add two numbers", {"type": "object", "properties": {"a": {"type": "number"}}},
                {"read_only_hint": True}),
    McpToolSpec("mul", "Multiply two numbers", {"type": "object"}),
]
THINK_AND_CALL = (
    "<|channel|>analysis<|message|>Need to add.<|end|>"
    '<|start|>assistant<|channel|>commentary to=calc.add <|constrain|>json<|message|>{"a":1,"b":2}<|call|>'
)
FINAL = "<|channel|>final<|message|>1 + 2 = 3.<|return|>"
_events = TypeAdapter(ResponseStreamEvent)


@dataclass
class Turn:
    """One response: its translator and every event of its stream, opening events included."""

    translator: ResponseTranslator
    events: list[BaseModel] = field(default_factory=list)

    def add(self, events: list[BaseModel]) -> list[BaseModel]:
        self.events += events
        return events

    def feed_text(self, encoding: HarmonyEncoding, text: str) -> list[BaseModel]:
        return self.add([e for t in encoding.encode(text, allowed_special="all") for e in self.translator.feed([t])])

    @property
    def response(self) -> Response:
        return self.translator.response


def new_turn(
    encoding: HarmonyEncoding,
    approval_required: Callable[[str, str], bool] | None = None,
    max_tool_calls: int | None = None,
    response_id: str = "resp_test",
    seal: Callable[[list[dict[str, Any]]], str] | None = None,
) -> Turn:
    response = make_response().model_copy(update={"id": response_id})
    events = opening_events(response)
    translator = ResponseTranslator(
        response, encoding=encoding, first_sequence_number=len(events), mcp_labels=LABELS, input_tokens=20,
        approval_required=approval_required, max_tool_calls=max_tool_calls, seal=seal,
    )
    turn = Turn(translator, events)
    turn.add(translator.start())
    return turn


def check_stream(turn: Turn) -> None:
    """The invariants of issue 3 on one stream: numbering, indices, types, and the SDK's accumulator."""
    events = turn.events
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    done = [e for e in events if e.type == "response.output_item.done"]
    assert added == list(range(len(added))) == [e.output_index for e in done]
    for event in events:
        wire = event.model_dump_json(by_alias=True)
        assert _events.validate_json(wire).model_dump() == event.model_dump()
    for event in events:
        if hasattr(event, "item_id"):
            (item,) = [d.item for d in done if d.output_index == event.output_index]
            assert event.item_id == item.id
    assert events[-1].response.output == [e.item for e in done] == turn.response.output
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(event)
    rebuilt = state._completed_response
    assert rebuilt is not None
    assert [without_parsed(item.to_dict()) for item in rebuilt.output] == [
        item.to_dict() for item in turn.response.output
    ]


