"""max_tool_calls: a call beyond the limit is not run, and the turn ends (the model cannot loop)."""

from __future__ import annotations

from support.mcp_turns import THINK_AND_CALL, check_stream, new_turn

from oss_responses.harmony.history import ApprovalAnswer

SECOND_CALL = '<|channel|>commentary to=calc.add <|constrain|>json<|message|>{"a":3,"b":4}<|call|>'


def test_call_beyond_max_tool_calls_fails_and_ends_turn(encoding) -> None:
    turn = new_turn(encoding, max_tool_calls=1)
    turn.feed_text(encoding, THINK_AND_CALL)
    turn.add(turn.translator.feed_tool_result("3"))
    turn.translator.continuation_token_ids()
    events = turn.feed_text(encoding, SECOND_CALL)
    assert [e.type for e in events][-3:] == [
        "response.mcp_call_arguments.done", "response.mcp_call.failed", "response.output_item.done"
    ]
    assert turn.translator.pending_tool_call is None and turn.translator.tool_limit_reached
    turn.add(turn.translator.finish("stop"))
    refused = turn.response.output[-1]
    assert refused.status == "failed" and "max_tool_calls" in refused.error.content[0]["text"]
    assert turn.translator.output_messages[-1]["role"] == "tool"
    assert turn.response.status == "completed"
    check_stream(turn)


def test_calls_within_max_tool_calls_run(encoding) -> None:
    turn = new_turn(encoding, max_tool_calls=2)
    turn.feed_text(encoding, THINK_AND_CALL)
    turn.translator.feed_tool_result("3")
    turn.translator.continuation_token_ids()
    turn.feed_text(encoding, SECOND_CALL)
    assert turn.translator.pending_tool_call.arguments == '{"a":3,"b":4}' and not turn.translator.tool_limit_reached


def test_approved_call_counts_toward_max_tool_calls(encoding) -> None:
    turn = new_turn(encoding, max_tool_calls=1)
    answer = ApprovalAnswer("mcpr_1", "calc", "add", '{"a":1,"b":2}', True, recipient="calc.add", channel="commentary")
    turn.add(turn.translator.open_approved_call(answer))
    turn.add(turn.translator.feed_tool_result("3"))
    turn.translator.continuation_token_ids()
    turn.feed_text(encoding, SECOND_CALL)
    assert turn.translator.tool_limit_reached and turn.translator.pending_tool_call is None
