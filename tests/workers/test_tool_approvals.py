"""Approvals of MCP calls across responses: the first response ends with an mcp_approval_request; the
next (previous_response_id + mcp_approval_response) runs or declines the call and continues. The
pending call is stored, so a different worker may answer it."""

from __future__ import annotations

from typing import Any

from support.tool_turns import CALC, ToolEnv, final_text, item, types_of

from oss_responses.workers.testing import local_worker

ASK = CALC | {"require_approval": "always"}
CALL = 'call calc.calculate {"expression": "6*7"}'


def answer(request: dict[str, Any], approve: bool) -> dict[str, Any]:
    """The body of a request answering ``request`` (an mcp_approval_request item)."""
    response = {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": approve}
    return {"input": [response], "tools": [ASK]}


def test_call_needing_approval_ends_response_with_request(tools: ToolEnv) -> None:
    response = tools.run(input=CALL, tools=[ASK])
    assert types_of(response) == ["mcp_list_tools", "reasoning", "mcp_approval_request"]
    request = item(response, "mcp_approval_request")
    assert (request["server_label"], request["name"]) == ("calc", "calculate")
    assert response["status"] == "completed"


def test_approved_call_runs_in_next_response(tools: ToolEnv) -> None:
    with local_worker(tools.settings) as worker:
        first = tools.run(worker, input=CALL, tools=[ASK])
        request = item(first, "mcp_approval_request")
        second = tools.run(worker, previous_response_id=first["id"], **answer(request, approve=True))
    assert types_of(second) == ["mcp_call", "reasoning", "message"]
    call = item(second, "mcp_call")
    assert (call["approval_request_id"], call["output"]) == (request["id"], "42")
    assert final_text(second) == "The tool calc.calculate returned: 42"


def test_declined_call_is_not_run_and_model_is_told(tools: ToolEnv) -> None:
    with local_worker(tools.settings) as worker:
        first = tools.run(worker, input=CALL, tools=[ASK])
        refusal = answer(item(first, "mcp_approval_request"), approve=False)
        second = tools.run(worker, previous_response_id=first["id"], **refusal)
    assert types_of(second) == ["reasoning", "message"]
    assert "declined" in final_text(second)
    assert second["status"] == "completed"


def test_approval_is_answered_by_a_restarted_worker(tools: ToolEnv) -> None:
    first = tools.run(input=CALL, tools=[ASK])  # each run: a worker of its own, stopped after it
    second = tools.run(previous_response_id=first["id"], **answer(item(first, "mcp_approval_request"), approve=True))
    assert item(second, "mcp_call")["output"] == "42"


def test_never_filter_skips_approval_for_matching_tools(tools: ToolEnv) -> None:
    calc = CALC | {"require_approval": {"never": {"tool_names": ["calculate"]}}}
    with local_worker(tools.settings) as worker:
        allowed = tools.run(worker, input=CALL, tools=[calc])
        asked = tools.run(worker, input='call calc.python {"code": "1+1"}', tools=[calc])
    assert item(allowed, "mcp_call")["output"] == "42"
    assert types_of(asked)[-1] == "mcp_approval_request"


def test_read_only_filter_uses_listed_annotations(tools: ToolEnv) -> None:
    calc = CALC | {"require_approval": {"never": {"read_only": True}}}
    response = tools.run(input=CALL, tools=[calc])  # the calculator marks its tools read-only
    assert item(response, "mcp_call")["output"] == "42"


def test_conversation_with_settled_approval_resent_by_value_goes_on(tools: ToolEnv) -> None:
    # A client that keeps its conversation (the Agents SDK's sessions, LangChain, the Vercel AI SDK) sends
    # it whole on the next turn: the approval answered earlier is history, not a pending answer.
    with local_worker(tools.settings) as worker:
        first = tools.run(worker, input=CALL, tools=[ASK])
        request = item(first, "mcp_approval_request")
        approval = answer(request, approve=True)["input"]
        history = [{"role": "user", "content": CALL}, *first["output"], *approval]
        second = tools.run(worker, input=history, tools=[ASK])
        third = tools.run(worker, input=[*history, *second["output"], {"role": "user", "content": "thanks"}],
                          tools=[ASK])
    assert item(second, "mcp_call")["output"] == "42"
    assert third["status"] == "completed" and final_text(third)
