"""Tool turns in the worker against real MCP servers (the demo calculator and a misbehaving one):
tool lists, calls, results back to the model, failures the model reads, limits, cancel.

Every stream is checked by ``ToolEnv.stored``: openai's event types and the SDK's accumulator."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from support.engines import RecordingEngine, SequenceEngine
from support.streams import assert_contiguous, events_of, wait_for_event
from support.tool_turns import (
    BAD,
    CALC,
    ToolEnv,
    error_text,
    final_text,
    item,
    types_of,
)
from support.workers import cancel

from oss_responses.engine.scripted import ScriptedEngine
from oss_responses.storage import get_response
from oss_responses.vocab import load_encoding
from oss_responses.workers.testing import local_worker, run_response_now

CODE_INTERPRETER_LABEL = {"type": "mcp", "server_label": "code_interpreter"}  # the operator's label for python


def test_code_interpreter_call_runs_on_its_label_server(tools: ToolEnv) -> None:
    response = tools.run(input="call python 123*456", tools=[CODE_INTERPRETER_LABEL])
    assert types_of(response) == ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "message"]
    assert response["status"] == "completed"
    assert item(response, "mcp_list_tools")["server_label"] == "code_interpreter"
    call = item(response, "mcp_call")
    assert (call["server_label"], call["name"], call["arguments"]) == ("code_interpreter", "python", "123*456")
    assert call["output"].strip() == "56088"  # python's output: what the program printed
    assert "56088" in final_text(response)


def test_list_tools_item_holds_the_server_tools(tools: ToolEnv) -> None:
    response = tools.run(input="hello", tools=[CALC])
    listing = item(response, "mcp_list_tools")
    assert [tool["name"] for tool in listing["tools"]] == ["calculate", "python"]
    assert listing["tools"][0]["annotations"]["readOnlyHint"] is True  # MCP's names, as the server sent them
    assert listing.get("error") is None


def test_mcp_call_result_is_quoted_in_final_answer(tools: ToolEnv) -> None:
    response = tools.run(input='call calc.calculate {"expression": "6*7"}', tools=[CALC])
    assert types_of(response) == ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "message"]
    assert item(response, "mcp_call")["output"] == "42"
    assert final_text(response) == "The tool calc.calculate returned: 42"


def test_second_turn_reuses_stored_tool_list(tools: ToolEnv) -> None:
    encoding = load_encoding(tools.settings.tiktoken_dir)
    engine = RecordingEngine(ScriptedEngine.from_settings(tools.settings, encoding), encoding)
    with local_worker(tools.settings, engine=engine) as worker:
        first = tools.run(worker, input="hello", tools=[CALC])
        second = tools.run(
            worker, input='call calc.calculate {"expression": "2+3"}', tools=[CALC], previous_response_id=first["id"]
        )
    assert "mcp_list_tools" not in types_of(second)
    assert item(second, "mcp_call")["output"] == "5"
    assert "namespace calc" in engine.prompt_text() and "type calculate" in engine.prompt_text()


BIG_NUMBER_LOOP = " ".join(['call calc.calculate {"expression": "10**300"}'] * 5)  # results of ~100 tokens


def _run_in_small_context(tools: ToolEnv, **body: Any) -> tuple[str, list[int]]:
    """The response run with a context of 900 tokens; and each engine call's prompt length."""
    settings = tools.settings.model_copy(update={"scripted_context_tokens": 900})
    encoding = load_encoding(settings.tiktoken_dir)
    engine = RecordingEngine(ScriptedEngine.from_settings(settings, encoding), encoding)
    response_id, secrets = tools.accept(input=BIG_NUMBER_LOOP, tools=[CALC], max_output_tokens=400, **body)
    with local_worker(settings, engine=engine) as worker:
        run_response_now(response_id, worker=worker, secrets=secrets)
    return response_id, [len(prompt) for prompt in engine.prompts]


def test_tool_loop_outgrowing_context_fails_without_truncation(tools: ToolEnv) -> None:
    response_id, _ = _run_in_small_context(tools)
    record = tools.db.run(get_response, response_id)
    assert record is not None and record.status == "failed"
    assert record.response["error"]["code"] == "context_length_exceeded"


def test_tool_loop_with_truncation_auto_drops_its_earliest_steps_to_fit(tools: ToolEnv) -> None:
    response_id, lengths = _run_in_small_context(tools, truncation="auto")
    record = tools.db.run(get_response, response_id)
    assert record is not None and record.response["error"] is None
    # Uncut, the fifth engine call's prompt would be 1,021 tokens; each stayed within 900 - 400, the
    # loop going on until the output budget was spent (the scripted model sees fewer results once cut).
    assert len(lengths) == 5 and max(lengths) <= 900 - 400
    assert types_of(record.response).count("mcp_call") == 4
    assert record.status == "incomplete" and record.response["incomplete_details"]["reason"] == "max_output_tokens"
    assert_contiguous(events_of(tools.redis, response_id))


def test_tool_error_fails_the_call_and_the_model_continues(tools: ToolEnv) -> None:
    response = tools.run(input="call bad.crash {}", tools=[BAD])
    call = item(response, "mcp_call")
    assert "Error executing tool crash" in error_text(call)
    assert response["status"] == "completed"
    assert "Error executing tool crash" in final_text(response)


def test_slow_tool_times_out_as_failed_call(tools: ToolEnv) -> None:
    tools.settings = tools.settings.model_copy(update={"mcp_call_timeout_seconds": 0.5})
    started = time.monotonic()
    response = tools.run(input='call bad.sleep {"seconds": 10}', tools=[BAD])
    assert time.monotonic() - started < 5
    call = item(response, "mcp_call")
    assert "timed out" in error_text(call)
    assert response["status"] == "completed"


def test_unreachable_server_fails_listing_and_call(tools: ToolEnv) -> None:
    gone = {"type": "mcp", "server_label": "gone", "require_approval": "never"}
    response = tools.run(input='call gone.anything {"a": 1}', tools=[gone])
    assert types_of(response) == ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "message"]
    assert "cannot connect" in item(response, "mcp_list_tools")["error"]
    call = item(response, "mcp_call")
    assert "unreachable" in error_text(call)
    assert response["status"] == "completed"


def test_list_tools_failure_streams_failed_event(tools: ToolEnv) -> None:
    gone = {"type": "mcp", "server_label": "gone", "require_approval": "never"}
    response_id, _ = tools.accept(input="hello", tools=[gone])
    run_response_now(response_id, tools.settings)
    assert "response.mcp_list_tools.failed" in tools.event_types(response_id)
    assert tools.stored(response_id)["status"] == "completed"


def test_allowed_tools_filters_list_and_refuses_other_calls(tools: ToolEnv) -> None:
    calc = CALC | {"allowed_tools": ["calculate"]}
    response = tools.run(input='call calc.python {"code": "1+1"}', tools=[calc])
    assert [tool["name"] for tool in item(response, "mcp_list_tools")["tools"]] == ["calculate"]
    call = item(response, "mcp_call")
    assert "not allowed" in error_text(call)


def test_max_tool_calls_refuses_the_call_beyond_it(tools: ToolEnv) -> None:
    encoding = load_encoding(tools.settings.tiktoken_dir)
    call = '<|channel|>commentary to=calc.calculate <|constrain|>json<|message|>{"expression": "1+1"}<|call|>'
    engine = SequenceEngine(encoding, [call, call, "<|channel|>final<|message|>never<|return|>"])
    with local_worker(tools.settings, engine=engine) as worker:
        response = tools.run(worker, input="twice", tools=[CALC], max_tool_calls=1)
    calls = [i for i in response["output"] if i["type"] == "mcp_call"]
    assert [c["status"] for c in calls] == ["completed", "failed"]
    assert "max_tool_calls" in error_text(calls[1])
    assert response["status"] == "completed" and engine.generations == 2


def test_cancel_during_tool_call_does_not_wait_for_the_tool(tools: ToolEnv) -> None:
    response_id, secrets = tools.accept(input='call bad.sleep {"seconds": 30}', tools=[BAD], background=True)
    with local_worker(tools.settings) as worker, ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_response_now, response_id, worker=worker, secrets=secrets)
        wait_for_event(tools.redis, response_id, "response.mcp_call_arguments.done")
        cancel(tools.db, tools.redis, tools.settings, response_id)
        # The tool sleeps 30 s: ending within 10 leaves a stalled machine its margin and still tells
        # a cut call from one waited out.
        assert running.result(timeout=10) == "cancelled"
    response = tools.stored(response_id)
    assert response["status"] == "cancelled"


def test_function_tools_and_mcp_tools_render_together(tools: ToolEnv) -> None:
    function = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    response = tools.run(input='call functions.get_weather {"city": "Paris"}', tools=[function, CALC])
    assert types_of(response) == ["mcp_list_tools", "reasoning", "function_call"]
    assert json.loads(item(response, "function_call")["arguments"]) == {"city": "Paris"}

