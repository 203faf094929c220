"""Invariants every event stream must keep, checked on every golden scenario."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from support.harmony_transcripts import SCENARIOS, Run, run_scenario
from support.sdk import without_parsed

from oss_responses.statuses import TERMINAL_EVENT_TYPES

_events_adapter = TypeAdapter(ResponseStreamEvent)


def _item_events(run: Run) -> dict[int, list]:
    by_index: dict[int, list] = defaultdict(list)
    for event in run.events:
        if hasattr(event, "output_index"):
            by_index[event.output_index].append(event)
    return by_index


def _deltas(events: list) -> str:
    return "".join(event.delta for event in events if event.type.endswith(".delta"))


def _done_text(item) -> str:
    if item.type in ("function_call", "mcp_call"):
        return item.arguments
    return "".join(part.text for part in item.content or [])


def test_sequence_numbers_start_at_zero_and_rise_by_one(scenario_run: Run) -> None:
    assert [event.sequence_number for event in scenario_run.events] == list(range(len(scenario_run.events)))


def test_lifecycle_events_open_and_close_the_stream(scenario_run: Run) -> None:
    types = [event.type for event in scenario_run.events]
    opening = ["response.created", "response.queued", "response.in_progress"]
    if not scenario_run.translator.response.background:
        opening.remove("response.queued")
    assert types[: len(opening)] == opening
    assert types[-1] in TERMINAL_EVENT_TYPES
    assert sum(t in TERMINAL_EVENT_TYPES for t in types) == 1


def test_item_events_share_item_id_and_output_index(scenario_run: Run) -> None:
    for events in _item_events(scenario_run).values():
        item_id = events[0].item.id
        assert all(getattr(event, "item_id", None) in (None, item_id) for event in events)
        assert all(event.item.id == item_id for event in events if hasattr(event, "item"))


def test_items_go_added_then_deltas_then_done(scenario_run: Run) -> None:
    for events in _item_events(scenario_run).values():
        assert events[0].type == "response.output_item.added"
        assert events[-1].type == "response.output_item.done"
        assert [e.type for e in events].count("response.output_item.done") == 1


def test_output_index_counts_items_from_zero(scenario_run: Run) -> None:
    added = [event.output_index for event in scenario_run.events if event.type == "response.output_item.added"]
    assert added == list(range(len(added)))


def test_content_index_is_zero_in_every_item(scenario_run: Run) -> None:
    indices = {event.content_index for event in scenario_run.events if hasattr(event, "content_index")}
    assert indices <= {0}


def test_done_item_holds_concatenated_deltas(scenario_run: Run) -> None:
    for events in _item_events(scenario_run).values():
        assert _done_text(events[-1].item) == _deltas(events)


def test_terminal_output_equals_done_items(scenario_run: Run) -> None:
    done = [event.item for event in scenario_run.events if event.type == "response.output_item.done"]
    assert scenario_run.events[-1].response.output == done
    assert scenario_run.translator.response.output == done


def test_events_validate_against_response_stream_event(scenario_run: Run) -> None:
    for event in scenario_run.events:
        wire = event.model_dump_json(by_alias=True)  # the wire name of ResponseFunctionToolCall.async_ is "async"
        assert _events_adapter.validate_json(wire).model_dump() == event.model_dump()


def test_terminal_response_validates_against_response(scenario_run: Run) -> None:
    response = scenario_run.events[-1].response
    wire = response.model_dump_json(by_alias=True)
    assert Response.model_validate_json(wire).model_dump() == response.model_dump()


def test_sdk_accumulator_rebuilds_response(scenario_run: Run) -> None:
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in scenario_run.events:
        state.handle_event(event)
    final = scenario_run.translator.response
    if final.status == "completed":
        rebuilt = state._completed_response
        assert rebuilt is not None
        assert [without_parsed(item.to_dict()) for item in rebuilt.output] == [item.to_dict() for item in final.output]




def _chunker(cuts: list[int]):
    def split(tokens: list[int]) -> list[list[int]]:
        points = sorted({cut % (len(tokens) + 1) for cut in cuts} | {0, len(tokens)})
        return [tokens[a:b] for a, b in pairwise(points)]

    return split


def _summary(run: Run) -> list[tuple]:
    done = [event.item for event in run.events if event.type == "response.output_item.done"]
    deltas = [_deltas(events) for events in _item_events(run).values()]
    return [(item.type, getattr(item, "status", None), _done_text(item)) for item in done] + [tuple(deltas)] + [
        (run.translator.response.status, run.translator.response.usage.output_tokens)
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(SCENARIOS)), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_chunking_gives_same_items_and_deltas(encoding, name: str, cuts: list[int]) -> None:
    scenario = SCENARIOS[name]
    assert _summary(run_scenario(encoding, scenario, _chunker(cuts))) == _summary(run_scenario(encoding, scenario))
