"""Invariants every event stream must keep, checked on every golden scenario and on hostile model output
(``support/harmony_fuzz.py``: harmony's markup in any order, unknown channels and tools, split UTF-8)."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from openai_harmony import Message
from pydantic import TypeAdapter
from support.harmony_fuzz import (
    INPUT_TOKENS,
    Script,
    Setup,
    hostile_scripts,
    run_script,
    setups,
    well_formed,
    well_formed_parts,
)
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
    """What the item's deltas spell: its arguments, code or text (nothing for items shown whole)."""
    if item.type in ("function_call", "mcp_call"):
        return item.arguments
    if item.type == "code_interpreter_call":
        return item.code or ""
    return "".join(part.text for part in getattr(item, "content", None) or [])


def test_sequence_numbers_start_at_zero_and_rise_by_one(scenario_run: Run) -> None:
    assert [event.sequence_number for event in scenario_run.events] == list(range(len(scenario_run.events)))


def test_lifecycle_events_open_and_close_the_stream(scenario_run: Run) -> None:
    types = [event.type for event in scenario_run.events]
    opening = ["response.created", "response.queued", "response.in_progress"]
    if not scenario_run.translator.response.background:
        opening.remove("response.queued")
    assert types[: len(opening)] == opening
    if scenario_run.translator.response.status == "cancelled":  # OpenAI defines no event for it
        assert not any(t in TERMINAL_EVENT_TYPES for t in types)
        return
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
        for event in events:  # output_text.done, reasoning_text.done, *arguments.done, code.done
            done_text = next((getattr(event, k) for k in ("text", "arguments", "code") if hasattr(event, k)), None)
            if event.type.endswith(".done") and isinstance(done_text, str):
                assert done_text == _deltas(events)


def test_terminal_output_equals_done_items(scenario_run: Run) -> None:
    done = [event.item for event in scenario_run.events if event.type == "response.output_item.done"]
    if scenario_run.translator.response.status != "cancelled":
        assert scenario_run.events[-1].response == scenario_run.translator.response
    assert scenario_run.translator.response.output == done
    assert all(getattr(item, "status", None) != "in_progress" for item in done)


def test_events_validate_against_response_stream_event(scenario_run: Run) -> None:
    for event in scenario_run.events:
        wire = event.model_dump_json(by_alias=True)  # the wire name of ResponseFunctionToolCall.async_ is "async"
        assert _events_adapter.validate_json(wire).model_dump() == event.model_dump()


def test_terminal_response_validates_against_response(scenario_run: Run) -> None:
    response = scenario_run.translator.response  # the terminal event's (checked above), or the cancelled one
    wire = response.model_dump_json(by_alias=True)
    assert Response.model_validate_json(wire).model_dump() == response.model_dump()


def test_sdk_accumulator_rebuilds_response(scenario_run: Run) -> None:
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in scenario_run.events:
        state.handle_event(event)
    final = scenario_run.translator.response
    # The SDK's snapshot, built from the added items and their deltas, spells what the items end with.
    snapshot = state._ResponseStreamState__current_snapshot  # type: ignore[attr-defined]
    for built, item in zip(snapshot.output, final.output, strict=True):
        if item.type == "message":
            assert [part.text for part in built.content] == [part.text for part in item.content]
        elif item.type == "function_call":
            assert built.arguments == item.arguments
    if final.status == "completed":
        rebuilt = state._completed_response
        assert rebuilt is not None
        assert [without_parsed(item.to_dict()) for item in rebuilt.output] == [item.to_dict() for item in final.output]


def test_usage_counts_every_generated_token(scenario_run: Run) -> None:
    usage = scenario_run.translator.response.usage
    assert usage.output_tokens == len(scenario_run.generated)
    assert usage.input_tokens == INPUT_TOKENS + sum(len(tokens) for tokens in scenario_run.continuations)
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert 0 <= usage.output_tokens_details.reasoning_tokens <= usage.output_tokens
    assert usage.input_tokens_details.cached_tokens <= usage.input_tokens


def test_stored_messages_render_as_harmony(scenario_run: Run, encoding) -> None:
    """The turn is stored as these messages and replayed by the next: each renders."""
    for message in scenario_run.translator.output_messages:
        encoding.render(Message.from_dict(message))


def test_approval_request_is_the_call_awaiting_an_answer(scenario_run: Run) -> None:
    """An ``mcp_approval_request`` shown is answerable: its call is the turn's last message (the next turn's
    tool answer follows it), and the turn waits on it."""
    requests = [item for item in scenario_run.translator.response.output if item.type == "mcp_approval_request"]
    if not requests or scenario_run.translator.response.status != "completed":
        return
    pending = scenario_run.translator.pending_approval
    assert [request.id for request in requests] == [pending.approval_request_id]
    last = scenario_run.translator.output_messages[-1]
    assert (last["role"], last.get("recipient")) == ("assistant", pending.recipient)


INVARIANTS = [check for name, check in sorted(globals().items()) if name.startswith("test_") and callable(check)]




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


def _check_all(run: Run, encoding) -> None:
    for check in INVARIANTS:
        check(run, encoding) if "encoding" in check.__code__.co_varnames else check(run)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), setup=setups())
def test_hostile_output_keeps_every_invariant(encoding, data, setup: Setup) -> None:
    script = data.draw(hostile_scripts(encoding))
    _check_all(run_script(encoding, setup, script), encoding)


def _outcome(run: Run) -> tuple:
    """What a client ends with, ids included (seeded): chunking changes how deltas are grouped, not this."""
    response = run.translator.response
    return response.status, response.error, response.output, run.translator.output_messages


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), setup=setups())
def test_hostile_output_ends_alike_however_chunked(encoding, data, setup: Setup) -> None:
    script = data.draw(hostile_scripts(encoding))
    one_by_one = Script(script.tokens, frozenset(range(len(script.tokens) + 1)), script.stop, script.tool_errors)
    assert _outcome(run_script(encoding, setup, script)) == _outcome(run_script(encoding, setup, one_by_one))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=well_formed_parts(), cuts=st.frozensets(st.integers(0, 100), max_size=12), setup=setups())
def test_split_characters_reach_clients_whole(encoding, parts, cuts: frozenset[int], setup: Setup) -> None:
    """Characters split across tokens (🦄, 𝕏, CJK) and across chunks: no delta holds a replacement
    character, and each message keeps the text the model wrote (the response may end at a call)."""
    run = run_script(encoding, setup, Script(well_formed(encoding, parts), cuts))
    _check_all(run, encoding)
    for event in run.events:
        assert "\ufffd" not in (getattr(event, "delta", None) or "")
    stored = [m["content"][0]["text"] for m in run.translator.output_messages if m["role"] == "assistant"]
    assert stored == ["".join(texts) for _, _, texts in parts][: len(stored)]
    assert len(stored) == len(parts) or run.translator.response.output[-1].type != "message"
