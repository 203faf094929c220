"""MCP approvals: a call that needs approval ends the response; the next response runs or declines it."""

from __future__ import annotations

import pytest
from support.mcp_turns import (
    CALC_TOOLS,
    FINAL,
    THINK_AND_CALL,
    Turn,
    check_stream,
    new_turn,
)

from oss_responses.api.sealed import with_included
from oss_responses.errors import BadRequest
from oss_responses.harmony.history import (
    ConversationTurn,
    find_approval,
    listed_tools,
    turn_items,
)
from oss_responses.harmony.render import RenderedPrompt, RenderOptions, render_prompt
from oss_responses.requests import parse_create_request
from oss_responses.sealing import Sealer, new_key
from oss_responses.storage.records import SEALING_PLAN, ResponseRecord
from oss_responses.wire import response_json

OPTIONS = RenderOptions(conversation_start_date="2026-11-23", mcp_tools={"calc": CALC_TOOLS})
CALC = {"type": "mcp", "server_label": "calc", "server_url": "http://calc"}
CALL = '<|start|>assistant to=calc.add<|channel|>commentary <|constrain|>json<|message|>{"a":1,"b":2}<|call|>'


def _always(server_label: str, tool: str) -> bool:
    return True


def _request(input_, **body):
    return parse_create_request({"model": "gpt-oss-20b", "tools": [CALC], "input": input_, **body})


def _stored(request, rendered: RenderedPrompt, turn: Turn) -> ConversationTurn:
    """What the worker stores for a turn, read back as the next turn's history."""
    items = turn_items(request.model_dump(mode="json")["input"], turn.response.model_dump(mode="json")["output"])
    return ConversationTurn(rendered.new_messages + turn.translator.output_messages, {}, items)


def _first_turn(encoding) -> tuple[ConversationTurn, Turn]:
    request = _request("Add 1 and 2")
    rendered = render_prompt(request, [], OPTIONS, encoding)
    turn = new_turn(encoding, approval_required=_always, response_id="resp_1")
    turn.add(turn.translator.list_tools_started("calc"))
    turn.add(turn.translator.list_tools_completed("calc", CALC_TOOLS))
    turn.feed_text(encoding, THINK_AND_CALL)
    turn.add(turn.translator.finish("stop"))
    return _stored(request, rendered, turn), turn


def _answer(request_id: str, approve: bool, reason: str | None = None) -> list[dict]:
    return [{"type": "mcp_approval_response", "approval_request_id": request_id, "approve": approve, "reason": reason}]


def _second_turn(encoding, history, approve: bool) -> tuple[ConversationTurn, Turn, list[int]]:
    request_id = history[0].items[-1]["id"]
    request = _request(_answer(request_id, approve, None if approve else "not now"), previous_response_id="resp_1")
    rendered = render_prompt(request, history, OPTIONS, encoding)
    turn = new_turn(encoding, approval_required=_always, response_id="resp_2")
    turn.translator.use_prompt(mcp_labels=rendered.mcp_labels, input_tokens=len(rendered.token_ids))
    if approve:
        turn.add(turn.translator.open_approved_call(rendered.approval))
        turn.add(turn.translator.feed_tool_result("3"))
    else:
        turn.add(turn.translator.decline_call(rendered.approval))
    prompt = rendered.token_ids + turn.translator.continuation_token_ids()
    turn.feed_text(encoding, FINAL)
    turn.add(turn.translator.finish("stop"))
    return _stored(request, rendered, turn), turn, prompt


def test_call_needing_approval_ends_with_approval_request_item(encoding) -> None:
    _, turn = _first_turn(encoding)
    assert not any("mcp_call" in e.type for e in turn.events)
    assert [item.type for item in turn.response.output] == ["mcp_list_tools", "reasoning", "mcp_approval_request"]
    request = turn.response.output[-1]
    assert (request.server_label, request.name, request.arguments) == ("calc", "add", '{"a":1,"b":2}')
    assert request.id.startswith("mcpr_") and turn.response.status == "completed"
    pending = turn.translator.pending_approval
    assert (pending.approval_request_id, pending.recipient) == (request.id, "calc.add")
    assert turn.translator.pending_tool_call is None
    assert turn.translator.output_messages[-1]["recipient"] == "calc.add"
    check_stream(turn)


def test_approval_request_events_are_added_then_done(encoding) -> None:
    _, turn = _first_turn(encoding)
    tail = [e.type for e in turn.events if getattr(e, "output_index", None) == 2]
    assert tail == ["response.output_item.added", "response.output_item.done"]


def test_call_not_needing_approval_streams_mcp_call(encoding) -> None:
    turn = new_turn(encoding, approval_required=lambda label, tool: tool != "add")
    turn.feed_text(encoding, THINK_AND_CALL)
    assert turn.translator.pending_tool_call.name == "add" and turn.translator.pending_approval is None


def test_approved_call_runs_in_next_response_then_model_answers(encoding) -> None:
    first, _ = _first_turn(encoding)
    _, turn, prompt = _second_turn(encoding, [first], approve=True)
    request_id = first.items[-1]["id"]
    call = turn.response.output[0]
    assert [item.type for item in turn.response.output] == ["mcp_call", "message"]
    assert (call.approval_request_id, call.arguments, call.output, call.status) == (
        request_id, '{"a":1,"b":2}', "3", "completed"
    )
    assert [e.type for e in turn.events[2:7]] == [
        "response.output_item.added", "response.mcp_call.in_progress", "response.mcp_call_arguments.done",
        "response.mcp_call.completed", "response.output_item.done",
    ]
    assert encoding.decode(prompt).endswith(
        CALL + "<|start|>calc.add to=assistant<|channel|>commentary<|message|>3<|end|><|start|>assistant"
    )
    check_stream(turn)


def test_declined_call_tells_model_and_adds_no_item(encoding) -> None:
    first, _ = _first_turn(encoding)
    _, turn, prompt = _second_turn(encoding, [first], approve=False)
    assert [item.type for item in turn.response.output] == ["message"]
    assert encoding.decode(prompt).endswith(
        CALL + "<|start|>calc.add to=assistant<|channel|>commentary<|message|>"
        "The user declined this tool call; it was not run. Reason: not now<|end|><|start|>assistant"
    )
    check_stream(turn)


def test_third_turn_replays_call_then_result_then_answer(encoding) -> None:
    first, _ = _first_turn(encoding)
    second, _, _ = _second_turn(encoding, [first], approve=True)
    text = encoding.decode(render_prompt(_request("thanks"), [first, second], OPTIONS, encoding).token_ids)
    assert CALL + "<|start|>calc.add to=assistant<|channel|>commentary<|message|>3<|end|>" in text
    assert text.endswith("1 + 2 = 3.<|end|><|start|>user<|message|>thanks<|end|><|start|>assistant")


def test_reused_list_needs_no_new_listing(encoding) -> None:
    first, _ = _first_turn(encoding)
    assert set(listed_tools([first])) == {"calc"}


def test_unknown_approval_request_id_is_bad_request() -> None:
    with pytest.raises(BadRequest) as raised:
        find_approval([], _request(_answer("mcpr_nope", True)).input_items())
    assert raised.value.param == "input[0].approval_request_id"


def test_answering_approval_twice_is_bad_request(encoding) -> None:
    first, _ = _first_turn(encoding)
    second, _, _ = _second_turn(encoding, [first], approve=True)
    with pytest.raises(BadRequest) as raised:
        find_approval([first, second], _request(_answer(first.items[-1]["id"], True)).input_items())
    assert "already been answered" in raised.value.message


def test_approval_response_before_other_items_is_bad_request(encoding) -> None:
    first, _ = _first_turn(encoding)
    items = _request(_answer(first.items[-1]["id"], True) + [{"role": "user", "content": "go"}]).input_items()
    with pytest.raises(BadRequest) as raised:
        find_approval([first], items)
    assert raised.value.param == "input[0]"


def test_approval_request_in_input_replays_pending_call(encoding) -> None:
    request_item = {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "calc", "name": "add",
                    "arguments": '{"a":1,"b":2}'}
    request = _request([{"role": "user", "content": "Add 1 and 2"}, request_item, *_answer("mcpr_1", True)])
    rendered = render_prompt(request, [], OPTIONS, encoding)
    assert rendered.approval.recipient == "calc.add" and rendered.approval.approval_request_id == "mcpr_1"
    assert encoding.decode(rendered.token_ids).endswith("Add 1 and 2<|end|>" + CALL)


def test_approval_for_answered_call_in_input_is_bad_request(encoding) -> None:
    request_item = {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "calc", "name": "add",
                    "arguments": "{}"}
    request = _request([request_item, {"role": "user", "content": "hm"}, *_answer("mcpr_1", True)])
    with pytest.raises(BadRequest) as raised:
        render_prompt(request, [], OPTIONS, encoding)
    assert "not awaiting" in raised.value.message


def test_approval_request_is_the_same_whatever_the_chunking(encoding) -> None:
    whole = new_turn(encoding, approval_required=_always)
    whole.add(whole.translator.feed(encoding.encode(THINK_AND_CALL, allowed_special="all")))
    whole.add(whole.translator.finish("stop"))
    _, split = _first_turn(encoding)
    assert whole.response.output[-1].arguments == split.response.output[-1].arguments == '{"a":1,"b":2}'


@pytest.mark.parametrize("tools", [[], [{"type": "mcp", "server_label": "docs", "server_url": "http://docs"}]])
def test_approving_without_sending_the_calls_server_again_is_bad_request(encoding, tools: list) -> None:
    first, _ = _first_turn(encoding)
    request = parse_create_request({"model": "gpt-oss-20b", "tools": tools, "previous_response_id": "resp_1",
                                    "input": _answer(first.items[-1]["id"], True)})
    with pytest.raises(BadRequest) as raised:
        render_prompt(request, [first], OPTIONS, encoding)
    assert raised.value.param == "tools" and "'calc'" in raised.value.message


def test_declining_without_sending_the_calls_server_again_is_accepted(encoding) -> None:
    first, _ = _first_turn(encoding)
    request = parse_create_request({"model": "gpt-oss-20b", "previous_response_id": "resp_1",
                                    "input": _answer(first.items[-1]["id"], False)})
    assert render_prompt(request, [first], OPTIONS, encoding).approval is not None


def _by_value(first: Turn, answer: list[dict], second: Turn) -> list[dict]:
    """The conversation as a client that keeps it resends it (the Agents SDK's to_input_list, sessions)."""
    return [{"role": "user", "content": "Add 1 and 2"}, *first.response.model_dump(mode="json")["output"], *answer,
            *second.response.model_dump(mode="json")["output"], {"role": "user", "content": "And now 3 and 4?"}]


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "declined"])
def test_settled_approval_resent_by_value_renders_as_the_stored_conversation(encoding, approve: bool) -> None:
    stored_first, first = _first_turn(encoding)
    stored_second, second, _ = _second_turn(encoding, [stored_first], approve)
    request_id = stored_first.items[-1]["id"]
    answer = _answer(request_id, approve, None if approve else "not now")
    by_value = _request(_by_value(first, answer, second))
    by_id = _request("And now 3 and 4?", previous_response_id="resp_2")

    rendered = render_prompt(by_value, [], OPTIONS, encoding)

    assert rendered.approval is None  # history: nothing to run or decline now
    assert encoding.decode(rendered.token_ids) == encoding.decode(
        render_prompt(by_id, [stored_first, stored_second], OPTIONS, encoding).token_ids
    )


def test_approving_answer_resent_without_its_call_is_bad_request(encoding) -> None:
    stored_first, first = _first_turn(encoding)
    items = [*first.response.model_dump(mode="json")["output"], *_answer(stored_first.items[-1]["id"], True),
             {"role": "user", "content": "go on"}]
    with pytest.raises(BadRequest) as raised:
        render_prompt(_request(items), [], OPTIONS, encoding)
    assert raised.value.param == f"input[{len(items) - 2}]"


CALL_WRITTEN_PAST = (
    "<|channel|>analysis<|message|>Need to add.<|end|>"
    '<|start|>assistant<|channel|>commentary to=calc.add <|constrain|>json<|message|>{"a":1,"b":2}<|end|>'
    "<|start|>assistant<|channel|>final<|message|>It is 3.<|return|>"
)


def test_approval_call_written_past_shows_no_request_to_answer(encoding) -> None:
    # <|end|> is no stop token: the model went on without waiting, so no request awaits an answer. An
    # mcp_approval_request shown here could not be answered (the next turn's approval was a 400: "not awaiting").
    request = _request("Add 1 and 2")
    rendered = render_prompt(request, [], OPTIONS, encoding)
    turn = new_turn(encoding, approval_required=_always, response_id="resp_1")
    turn.feed_text(encoding, CALL_WRITTEN_PAST)
    turn.add(turn.translator.finish("stop"))
    assert [item.type for item in turn.response.output] == ["reasoning", "message"]
    assert turn.translator.pending_approval is None and turn.translator.pending_tool_call is None
    check_stream(turn)
    stored = _stored(request, rendered, turn)
    assert [(m["role"], m.get("recipient")) for m in stored.messages[-3:]] == [
        ("assistant", "calc.add"), ("tool", "assistant"), ("assistant", None)
    ]
    assert "not run" in stored.messages[-2]["content"][0]["text"]
    render_prompt(_request("thanks", previous_response_id="resp_1"), [stored], OPTIONS, encoding)


def test_approval_call_written_past_replays_stateless_as_stored(encoding) -> None:
    # The call and its "not run" answer are stored but shown in no item: with sealing, a reasoning item carries
    # them, so a store=false replay of the output renders the prompt a previous_response_id continuation does.
    sealer = Sealer([new_key()])
    options = RenderOptions(conversation_start_date="2026-11-23", mcp_tools={"calc": CALC_TOOLS}, unseal=sealer.open)
    request = _request("Add 1 and 2")
    turn = new_turn(encoding, approval_required=_always, response_id="resp_1", seal=sealer.sealing("reasoning"))
    turn.feed_text(encoding, CALL_WRITTEN_PAST)
    turn.add(turn.translator.finish("stop"))
    output = turn.response.model_dump(mode="json", exclude_none=True)["output"]
    assert [item["type"] for item in output] == ["reasoning", "reasoning", "message"]
    _assert_replay_renders_chained_prompt(encoding, options, request, turn, output)


def test_approval_call_written_past_stored_without_include_replays_as_stored_once_retrieved_with_it(
    encoding,
) -> None:
    # Stored without include (no item carries the call), then retrieved with it: the worker's sealing plan puts
    # the call and its answer where a turn sealed at its creation carries them.
    sealer = Sealer([new_key()])
    options = RenderOptions(conversation_start_date="2026-11-23", mcp_tools={"calc": CALC_TOOLS}, unseal=sealer.open)
    request = _request("Add 1 and 2")
    turn = new_turn(encoding, approval_required=_always, response_id="resp_1")
    turn.feed_text(encoding, CALL_WRITTEN_PAST)
    turn.add(turn.translator.finish("stop"))
    output = _retrieved_with_include(turn, sealer)
    assert [item["type"] for item in output] == ["reasoning", "reasoning", "message"]
    _assert_replay_renders_chained_prompt(encoding, options, request, turn, output)


CALLS_WRITTEN_PAST = CALL_WRITTEN_PAST.replace(
    "<|start|>assistant<|channel|>final",
    '<|start|>assistant<|channel|>commentary to=calc.add <|constrain|>json<|message|>{"a":3,"b":4}<|end|>'
    "<|start|>assistant<|channel|>final",
)


def test_approval_calls_written_past_stored_without_include_retrieved_with_it_have_distinct_ids(encoding) -> None:
    # Two calls written past, nothing between them: each gets a reasoning item of its own where they stood, which
    # before each stands (the final answer) named both alike. The same id twice: a replay was a 400 (duplicate).
    sealer = Sealer([new_key()])
    options = RenderOptions(conversation_start_date="2026-11-23", mcp_tools={"calc": CALC_TOOLS}, unseal=sealer.open)
    request = _request("Add 1 and 2")
    turn = new_turn(encoding, approval_required=_always, response_id="resp_1")
    turn.feed_text(encoding, CALLS_WRITTEN_PAST)
    turn.add(turn.translator.finish("stop"))
    output = _retrieved_with_include(turn, sealer)
    assert [item["type"] for item in output] == ["reasoning", "reasoning", "reasoning", "message"]
    assert len({item["id"] for item in output}) == len(output)
    assert output == _retrieved_with_include(turn, sealer, blobs=[item.get("encrypted_content") for item in output])
    _assert_replay_renders_chained_prompt(encoding, options, request, turn, output)


def _retrieved_with_include(turn: Turn, sealer: Sealer, blobs: list | None = None) -> list[dict]:
    """The turn stored without include, as a retrieve with it answers (``blobs``: those of an earlier retrieve,
    Fernet's seal differing each time, put in place to compare the rest)."""
    record = ResponseRecord(id="resp_1", model="gpt-oss-20b", status="completed", background=False, store=True,
                            request={}, response=response_json(turn.response),
                            output_messages=turn.translator.output_messages,
                            state={SEALING_PLAN: turn.translator.sealing_plan})
    output = with_included(record.response, record, ["reasoning.encrypted_content"], sealer)["output"]
    if blobs is not None:
        output = [{**item, "encrypted_content": blob} if blob else item
                  for item, blob in zip(output, blobs, strict=True)]
    return output


def _assert_replay_renders_chained_prompt(
    encoding, options: RenderOptions, request, turn: Turn, output: list[dict]
) -> None:
    """``output`` sent back with ``store: false`` renders the prompt the turn chained by id renders."""
    chained = render_prompt(_request("thanks", previous_response_id="resp_1"),
                            [_stored(request, render_prompt(request, [], options, encoding), turn)], options, encoding)
    replay = [{"type": "message", "role": "user", "content": "Add 1 and 2"}, *output,
              {"type": "message", "role": "user", "content": "thanks"}]
    stateless = render_prompt(_request(replay, store=False), [], options, encoding)
    assert encoding.decode(stateless.token_ids) == encoding.decode(chained.token_ids)
