"""mcp_list_tools items: streamed by the translator before generation, reused from the conversation."""

from __future__ import annotations

import pytest
from support.harmony_transcripts import golden_tokens
from support.mcp_turns import CALC_TOOLS, FINAL, THINK_AND_CALL, check_stream, new_turn

from oss_responses.harmony.history import ConversationTurn, listed_tools, turn_items
from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.harmony.render import RenderOptions, render_prompt
from oss_responses.requests import parse_create_request

OPTIONS = RenderOptions(conversation_start_date="2026-11-23", builtin_tool_labels={"code_interpreter": "python"})
CALC = {"type": "mcp", "server_label": "calc", "server_url": "http://calc"}


def _list_item(label: str, tools: list[McpToolSpec], error: str | None = None) -> dict:
    return {
        "type": "mcp_list_tools", "id": f"mcpl_{label}", "server_label": label, "error": error,
        "tools": [{"name": t.name, "description": t.description, "input_schema": t.input_schema or {}} for t in tools],
    }


def test_list_tools_streams_added_in_progress_completed_done(encoding) -> None:
    turn = new_turn(encoding)
    turn.add(turn.translator.list_tools_started("calc"))
    turn.add(turn.translator.list_tools_completed("calc", CALC_TOOLS))
    types = [e.type for e in turn.events[2:]]
    assert types == [
        "response.output_item.added", "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed", "response.output_item.done",
    ]
    added, done = turn.events[2].item, turn.events[-1].item
    assert added.tools == [] and added.id == done.id and done.id.startswith("mcpl_")
    assert [(t.name, t.description, t.input_schema, t.annotations) for t in done.tools] == [
        ("add", "Add two numbers", CALC_TOOLS[0].input_schema, {"read_only_hint": True}),
        ("mul", "Multiply two numbers", {"type": "object"}, None),
    ]


def test_list_tools_failed_gives_item_with_error(encoding) -> None:
    turn = new_turn(encoding)
    turn.add(turn.translator.list_tools_started("calc"))
    events = turn.add(turn.translator.list_tools_failed("calc", "server unreachable"))
    assert [e.type for e in events] == ["response.mcp_list_tools.failed", "response.output_item.done"]
    assert (events[-1].item.error, events[-1].item.tools) == ("server unreachable", [])
    turn.feed_text(encoding, FINAL)
    turn.add(turn.translator.finish("stop"))
    check_stream(turn)


def test_list_tools_item_comes_before_reasoning_and_call(encoding) -> None:
    turn = new_turn(encoding)
    turn.add(turn.translator.list_tools_started("calc"))
    turn.add(turn.translator.list_tools_completed("calc", CALC_TOOLS))
    turn.feed_text(encoding, THINK_AND_CALL)
    turn.add(turn.translator.feed_tool_result("3"))
    turn.translator.continuation_token_ids()
    turn.feed_text(encoding, FINAL)
    turn.add(turn.translator.finish("stop"))
    assert [item.type for item in turn.response.output] == ["mcp_list_tools", "reasoning", "mcp_call", "message"]
    assert turn.response.output[2].output == "3"
    check_stream(turn)


def test_seeds_scenario_with_list_tools_first_keeps_stream_valid(encoding) -> None:
    turn = new_turn(encoding)
    turn.add(turn.translator.list_tools_started("code_interpreter"))
    turn.add(turn.translator.list_tools_completed("code_interpreter", [McpToolSpec("python", "Run Python")]))
    turn.add(turn.translator.feed(golden_tokens(encoding, "mcp_code_interpreter.1")))
    turn.add(turn.translator.feed_tool_result("56088\n"))
    turn.add(turn.translator.feed(golden_tokens(encoding, "mcp_code_interpreter.2")))
    turn.add(turn.translator.finish("stop"))
    output = turn.response.output
    assert [item.type for item in output] == ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "message"]
    assert (output[2].output, output[2].status) == ("56088\n", "completed")
    check_stream(turn)


def test_start_twice_emits_in_progress_once(encoding) -> None:
    turn = new_turn(encoding)
    assert turn.translator.start() == []


def test_list_tools_completed_without_start_raises(encoding) -> None:
    with pytest.raises(ValueError):
        new_turn(encoding).translator.list_tools_completed("calc", CALC_TOOLS)


def test_open_listing_fails_when_response_is_cancelled(encoding) -> None:
    turn = new_turn(encoding)
    turn.add(turn.translator.list_tools_started("calc"))
    events = turn.add(turn.translator.finish("abort"))
    assert [e.type for e in events] == ["response.mcp_list_tools.failed", "response.output_item.done"]
    assert turn.response.status == "cancelled" and turn.response.output[0].error


def test_listed_tools_takes_latest_successful_list_per_label() -> None:
    old = ConversationTurn([], items=[_list_item("calc", CALC_TOOLS[:1])])
    new = ConversationTurn([], items=[_list_item("calc", CALC_TOOLS), _list_item("docs", [], error="down")])
    lists = listed_tools([old, new])
    assert list(lists) == ["calc"] and [spec.name for spec in lists["calc"]] == ["add", "mul"]


def test_listed_tools_reads_translator_items_after_storage(encoding) -> None:
    turn = new_turn(encoding)
    turn.add(turn.translator.list_tools_started("calc"))
    turn.add(turn.translator.list_tools_completed("calc", CALC_TOOLS))
    turn.feed_text(encoding, FINAL)
    turn.add(turn.translator.finish("stop"))
    stored = turn.response.model_dump(mode="json")["output"]
    history = [ConversationTurn([], items=turn_items("hi", stored))]
    assert listed_tools(history) == {"calc": CALC_TOOLS}


def test_render_uses_list_stored_in_history(encoding) -> None:
    request = parse_create_request({"model": "m", "input": "hi", "tools": [CALC]})
    history = [ConversationTurn([], items=[_list_item("calc", CALC_TOOLS)])]
    text = encoding.decode(render_prompt(request, history, OPTIONS, encoding).token_ids)
    assert "namespace calc {" in text and "type add" in text and "type mul" in text


def test_render_uses_list_tools_input_item(encoding) -> None:
    listed = _list_item("calc", CALC_TOOLS[1:])
    request = parse_create_request(
        {"model": "m", "tools": [CALC], "input": [listed, {"role": "user", "content": "hi"}]}
    )
    text = encoding.decode(render_prompt(request, [], OPTIONS, encoding).token_ids)
    assert "type mul" in text and "type add" not in text


def test_render_prefers_fresh_list_over_stored(encoding) -> None:
    request = parse_create_request({"model": "m", "input": "hi", "tools": [CALC]})
    history = [ConversationTurn([], items=[_list_item("calc", CALC_TOOLS)])]
    options = RenderOptions(conversation_start_date="2026-11-23", mcp_tools={"calc": CALC_TOOLS[:1]})
    text = encoding.decode(render_prompt(request, history, options, encoding).token_ids)
    assert "type add" in text and "type mul" not in text
