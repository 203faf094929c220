"""Tool turns end to end, as a user sees them: the API process, a Celery worker process (scripted
engine, whose ``call RECIPIENT ARGS`` makes the model call a tool), the demo calculator and a
misbehaving MCP server as processes, the official SDK as the client; on SQLite and PostgreSQL.

Streamed responses go through the SDK's ``responses.stream`` (its accumulator must accept every
event); background ones are polled, then their stream is replayed and checked the same way.
The processes live for the module (one set per database); each test uses its own responses.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.responses import Response
from sqlalchemy import func, select
from support import MODEL
from support.mcp import CALCULATOR, DOCUMENTS, MISBEHAVING, mcp_server
from support.processes import start_api_process
from support.sdk import wait_ended
from support.tool_stack import (
    CALL_TIMEOUT_S,
    REFUSED_PREFIX,
    ToolStack,
    check_events,
    item,
    poll_response,
    stream_response,
    types_of,
)

from oss_responses.config import Settings
from oss_responses.sealing import new_key
from oss_responses.storage import Database, ResponseRow

CODE_INTERPRETER = {"type": "code_interpreter", "container": {"type": "auto"}}
# The seeds' setup: the operator's code_interpreter label served as gpt-oss's python, an MCP tool.
CODE_INTERPRETER_LABEL = {"type": "mcp", "server_label": "code_interpreter"}
SEEDS_INPUT = "Multiply 123*456 using the mcp code_interpreter tool. call python 123*456"
CALC = {"type": "mcp", "server_label": "calc", "require_approval": "never"}
ASK = CALC | {"require_approval": "always"}
BAD = {"type": "mcp", "server_label": "bad", "require_approval": "never"}
CALCULATE = 'call calc.calculate {"expression": "6*7"}'
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
          "tools": [{"type": "function", "name": "spawn_agent", "description": "Start a sub-agent",
                     "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}]}
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    with mcp_server(*CALCULATOR) as calculator, \
            mcp_server(*DOCUMENTS) as documents, \
            mcp_server(*MISBEHAVING) as misbehaving:
        yield {"code_interpreter": calculator, "calc": calculator, "web_search": documents, "bad": misbehaving}


@pytest.fixture(scope="module")
def stack(stack_database_url: str, redis_url: str, servers: dict[str, str],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolStack]:
    settings = Settings(database_url=stack_database_url, redis_url=redis_url, models=[MODEL],
                        scripted_tokens_per_second=2000.0, tool_servers=servers,
                        mcp_url_allowlist=[REFUSED_PREFIX], mcp_call_timeout_seconds=CALL_TIMEOUT_S,
                        encryption_keys=[new_key()])  # MCP credentials are kept sealed
    logs = tmp_path_factory.mktemp("tools-logs")
    db = Database(settings.database_url)
    stack = None
    try:
        api, base_url = start_api_process(settings, logs / "api.log")
        with openai.OpenAI(base_url=f"{base_url}/v1", api_key="test", max_retries=0, timeout=30) as client:
            stack = ToolStack(settings=settings, db=db, client=client, logs=logs, processes=[api])
            stack.start_worker()
            yield stack
    finally:
        if stack is not None:
            stack.stop()
        db.dispose()
        for path in sorted(logs.glob("*.log")):
            print(f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}")


def run(stack: ToolStack, mode: str, **body: Any) -> Response:
    if mode == "stream":
        return stream_response(stack.client, model=MODEL, **body)[1]
    return poll_response(stack.client, model=MODEL, **body)


def error_text(call: Any) -> str:
    assert call.status == "failed" and call.error.type == "mcp_tool_execution_error"
    return "".join(str(part["text"]) for part in call.error.content)


def row_count(stack: ToolStack) -> int:
    with stack.db.session() as session:
        return session.execute(select(func.count()).select_from(ResponseRow)).scalar_one()


# --- the seeds' scenario ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["stream", "background"])
def test_code_interpreter_multiplies_on_calculator(stack: ToolStack, mode: str) -> None:
    response = run(stack, mode, input=SEEDS_INPUT, tools=[CODE_INTERPRETER_LABEL])
    assert response.status == "completed"
    assert types_of(response) == ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "message"]
    call = item(response, "mcp_call")
    assert (call.server_label, call.name, call.arguments, call.output.strip()) == (
        "code_interpreter", "python", "123*456", "56088")
    assert "56088" in response.output_text


def test_code_interpreter_stream_reports_call_progress(stack: ToolStack) -> None:
    events, _ = stream_response(stack.client, model=MODEL, input=SEEDS_INPUT, tools=[CODE_INTERPRETER_LABEL])
    kinds = [event.type for event in events]
    order = ["response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
             "response.mcp_call.in_progress", "response.mcp_call_arguments.done", "response.mcp_call.completed",
             "response.output_text.done", "response.completed"]
    assert [kinds.index(kind) for kind in order] == sorted(kinds.index(kind) for kind in order)


# --- tool lists --------------------------------------------------------------------------------


def test_list_tools_item_lists_server_tools(stack: ToolStack) -> None:
    response = run(stack, "stream", input="hello", tools=[CALC])
    listing = item(response, "mcp_list_tools")
    assert listing.server_label == "calc" and listing.error is None
    assert [tool.name for tool in listing.tools] == ["calculate", "python"]


def test_second_turn_does_not_list_tools_again(stack: ToolStack) -> None:
    first = run(stack, "stream", input="hello", tools=[CALC])
    second = run(stack, "background", input=CALCULATE, tools=[CALC], previous_response_id=first.id)
    assert types_of(second) == ["reasoning", "mcp_call", "reasoning", "message"]
    assert item(second, "mcp_call").output == "42"


def test_allowed_tools_hides_other_tools(stack: ToolStack) -> None:
    calc = CALC | {"allowed_tools": ["calculate"]}
    response = run(stack, "stream", input='call calc.python {"code": "1+1"}', tools=[calc])
    assert [tool.name for tool in item(response, "mcp_list_tools").tools] == ["calculate"]
    assert "not allowed" in error_text(item(response, "mcp_call"))
    assert response.status == "completed"


def test_mcp_authorization_reaches_server_but_is_not_stored(stack: ToolStack) -> None:
    bad = BAD | {"authorization": "tok-e2e-secret"}
    response = run(stack, "background", input="call bad.authorization {}", tools=[bad])
    assert item(response, "mcp_call").output == "Bearer tok-e2e-secret"
    with stack.db.session() as session:
        request = session.execute(select(ResponseRow.request).where(ResponseRow.id == response.id)).scalar_one()
    assert "tok-e2e-secret" not in str(request) and response.tools[0].authorization is None


# --- approvals ---------------------------------------------------------------------------------


def _approval(request: Any, approve: bool = True) -> list[dict[str, Any]]:
    return [{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": approve}]


def test_approval_round_trip_runs_call_in_second_response(stack: ToolStack) -> None:
    first = run(stack, "stream", input=CALCULATE, tools=[ASK])
    assert first.status == "completed"
    assert types_of(first) == ["mcp_list_tools", "reasoning", "mcp_approval_request"]
    request = item(first, "mcp_approval_request")
    assert (request.server_label, request.name) == ("calc", "calculate")
    second = run(stack, "stream", input=_approval(request), tools=[ASK], previous_response_id=first.id)
    assert types_of(second) == ["mcp_call", "reasoning", "message"]
    call = item(second, "mcp_call")
    assert (call.approval_request_id, call.status, call.output) == (request.id, "completed", "42")
    assert "42" in second.output_text


def test_approval_survives_worker_restart(stack: ToolStack) -> None:
    first = run(stack, "background", input=CALCULATE, tools=[ASK])
    stack.restart_worker()
    second = run(stack, "background", input=_approval(item(first, "mcp_approval_request")), tools=[ASK],
                 previous_response_id=first.id)
    assert second.status == "completed" and item(second, "mcp_call").output == "42"


# --- function calls ----------------------------------------------------------------------------


def test_function_call_round_trip_continues_with_output(stack: ToolStack) -> None:
    first = run(stack, "stream", input='call functions.get_weather {"city": "Paris"}', tools=[WEATHER])
    assert first.status == "completed" and types_of(first) == ["reasoning", "function_call"]
    call = item(first, "function_call")
    assert (call.name, call.arguments) == ("get_weather", '{"city": "Paris"}') and call.call_id
    output = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 21}'}
    second = run(stack, "background", input=[output], tools=[WEATHER], previous_response_id=first.id)
    assert second.status == "completed" and '{"temp": 21}' in second.output_text


def test_namespace_function_call_round_trip_keeps_namespace(stack: ToolStack) -> None:
    first = run(stack, "stream", input='call multi_agent_v1.spawn_agent {"task": "lint"}', tools=[AGENTS])
    call = item(first, "function_call")
    assert (call.namespace, call.name, call.arguments) == ("multi_agent_v1", "spawn_agent", '{"task": "lint"}')
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "agent 7 started"}
    second = run(stack, "background", input=[output], tools=[AGENTS], previous_response_id=first.id)
    assert second.status == "completed" and "agent 7 started" in second.output_text


# --- built-in tools ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["stream", "background"])
def test_web_search_is_served_by_browser_backend_as_web_search_call(stack: ToolStack, mode: str) -> None:
    # As OpenAI streams a hosted web search: a web_search_call item with its action, no tool listing;
    # the model reads the documents server's result.
    tool = {"type": "web_search", "external_web_access": False}
    response = run(stack, mode, input='call browser.search {"query": "harmony"}', tools=[tool])
    assert types_of(response) == ["reasoning", "web_search_call", "reasoning", "message"]
    call = item(response, "web_search_call")
    assert (call.status, call.action.type, call.action.query) == ("completed", "search", "harmony")
    assert response.output_text.startswith("The tool browser.search returned: [{") and response.status == "completed"


def test_web_search_sources_asked_for_are_urls_of_its_result(stack: ToolStack) -> None:
    # include web_search_call.action.sources (the Vercel AI SDK asks for it): the documents server's
    # hits carry their URLs.
    response = run(stack, "background", input='call browser.search {"query": "harmony format"}',
                   tools=[{"type": "web_search"}], include=["web_search_call.action.sources"])
    action = item(response, "web_search_call").action
    assert [source.url for source in action.sources][:1] == ["https://github.com/openai/harmony"]


def test_web_search_call_streams_as_openai_streams_it(stack: ToolStack) -> None:
    events, _ = stream_response(stack.client, model=MODEL, input='call browser.search {"query": "harmony"}',
                                tools=[{"type": "web_search"}])
    call_id = next(e.item.id for e in events if e.type == "response.output_item.added"
                   and e.item.type == "web_search_call")
    kinds = [e.type for e in events if getattr(e, "item_id", None) == call_id
             or getattr(getattr(e, "item", None), "id", None) == call_id]
    assert kinds == ["response.output_item.added", "response.web_search_call.in_progress",
                     "response.web_search_call.searching", "response.web_search_call.completed",
                     "response.output_item.done"]


@pytest.mark.parametrize("mode", ["stream", "background"])
def test_hosted_code_interpreter_runs_code_as_code_interpreter_call(stack: ToolStack, mode: str) -> None:
    # As OpenAI's hosted tool: a code_interpreter_call with its code and container, no tool listing;
    # its outputs only when include asks for them.
    response = run(stack, mode, input=SEEDS_INPUT, tools=[CODE_INTERPRETER])
    assert types_of(response) == ["reasoning", "code_interpreter_call", "reasoning", "message"]
    call = item(response, "code_interpreter_call")
    assert (call.code, call.status, call.outputs) == ("123*456", "completed", None)
    assert call.container_id.startswith("cntr_") and "56088" in response.output_text


def test_hosted_code_interpreter_outputs_asked_for_hold_logs(stack: ToolStack) -> None:
    response = run(stack, "background", input=SEEDS_INPUT, include=["code_interpreter_call.outputs"],
                   tools=[{"type": "code_interpreter", "container": "cntr_given"}])
    call = item(response, "code_interpreter_call")
    assert (call.container_id, [(out.type, out.logs.strip()) for out in call.outputs]) == (  # type: ignore[union-attr]
        "cntr_given", [("logs", "56088")])


def test_hosted_code_interpreter_streams_as_openai_streams_it(stack: ToolStack) -> None:
    events, _ = stream_response(stack.client, model=MODEL, input=SEEDS_INPUT, tools=[CODE_INTERPRETER])
    call_id = next(e.item.id for e in events if e.type == "response.output_item.added"
                   and e.item.type == "code_interpreter_call")
    kinds = [e.type for e in events if getattr(e, "item_id", None) == call_id
             or getattr(getattr(e, "item", None), "id", None) == call_id]
    assert kinds[:2] == ["response.output_item.added", "response.code_interpreter_call.in_progress"]
    assert set(kinds[2:-4]) == {"response.code_interpreter_call_code.delta"}
    assert kinds[-4:] == ["response.code_interpreter_call_code.done", "response.code_interpreter_call.interpreting",
                          "response.code_interpreter_call.completed", "response.output_item.done"]
    assert not any(kind.startswith("response.mcp_") for kind in (e.type for e in events))


# --- failures and limits -----------------------------------------------------------------------


def test_call_to_tool_nobody_offered_is_answered_with_error(stack: ToolStack) -> None:
    response = run(stack, "stream", input='call nowhere.tool {"x": 1}', tools=[WEATHER])
    assert response.status == "completed" and types_of(response) == ["reasoning", "reasoning", "message"]
    assert "There is no tool 'nowhere.tool'" in response.output_text


def test_call_to_function_not_offered_is_answered_with_error(stack: ToolStack) -> None:
    response = run(stack, "stream", input='call functions.get_time {"city": "Paris"}', tools=[WEATHER])
    assert response.status == "completed" and types_of(response) == ["reasoning", "reasoning", "message"]
    assert "There is no tool 'functions.get_time'" in response.output_text


def test_tool_choice_none_answers_function_call_with_error(stack: ToolStack) -> None:
    response = run(stack, "background", input='call functions.get_weather {"city": "Paris"}', tools=[WEATHER],
                   tool_choice="none")
    assert response.status == "completed" and "function_call" not in types_of(response)
    assert "There is no tool 'functions.get_weather'" in response.output_text


def test_tool_choice_naming_function_makes_model_call_it(stack: ToolStack) -> None:
    # "hello" asks for no call: the worker writes the call's start, the model its arguments.
    response = run(stack, "stream", input="hello", tools=[WEATHER],
                   tool_choice={"type": "function", "name": "get_weather"})
    assert response.status == "completed" and types_of(response) == ["function_call"]
    assert (item(response, "function_call").name, response.tool_choice.name) == ("get_weather", "get_weather")  # type: ignore[union-attr]


def test_tool_choice_required_makes_model_call_a_function(stack: ToolStack) -> None:
    response = run(stack, "background", input='call functions.get_weather {"city": "Paris"}', tools=[WEATHER],
                   tool_choice="required")
    assert response.status == "completed" and types_of(response) == ["function_call"]
    assert item(response, "function_call").arguments == '{"city": "Paris"}'


TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object"}}


def test_tool_choice_allowed_tools_answers_call_to_tool_it_leaves_out_with_error(stack: ToolStack) -> None:
    # The Vercel AI SDK's allowedTools: the model is shown get_time only, and calls get_weather anyway.
    response = run(stack, "stream", input='call functions.get_weather {"city": "Paris"}', tools=[WEATHER, TIME],
                   tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function",
                                                                                  "name": "get_time"}]})
    assert response.status == "completed" and "function_call" not in types_of(response)
    assert "There is no tool 'functions.get_weather'" in response.output_text


def test_tool_choice_allowed_tools_required_makes_model_call_function_it_lists(stack: ToolStack) -> None:
    # "hello" asks for no call: the worker writes the start of a call, and the model names get_time,
    # the one function it is shown.
    response = run(stack, "background", input="hello", tools=[WEATHER, TIME, CALC],
                   tool_choice={"type": "allowed_tools", "mode": "required",
                                "tools": [{"type": "function", "name": "get_time"}, {"type": "mcp",
                                                                                    "server_label": "calc"}]})
    assert response.status == "completed" and types_of(response)[-1] == "function_call"
    assert item(response, "function_call").name == "get_time"
    assert response.tool_choice.type == "allowed_tools"  # type: ignore[union-attr]


def test_tool_choice_naming_mcp_server_makes_model_call_its_tool(stack: ToolStack) -> None:
    # "hello" asks for no call: the worker writes "to=calc.", the model names calc's first tool and
    # fills its signature (the expression "hello"), which the server cannot evaluate; the model then answers.
    response = run(stack, "stream", input="hello", tools=[CALC], tool_choice={"type": "mcp", "server_label": "calc"})
    assert response.status == "completed" and types_of(response) == ["mcp_list_tools", "mcp_call", "reasoning",
                                                                      "message"]
    call = item(response, "mcp_call")
    assert (call.server_label, call.name, call.arguments, call.status) == (
        "calc", "calculate", '{"expression":"hello"}', "failed")
    assert (response.tool_choice.type, response.tool_choice.server_label) == ("mcp", "calc")  # type: ignore[union-attr]


def test_tool_choice_naming_mcp_tool_makes_model_call_it_with_arguments_it_writes(stack: ToolStack) -> None:
    response = run(stack, "background", input="call calc.calculate {\"expression\": \"6*7\"}", tools=[CALC],
                   tool_choice={"type": "mcp", "server_label": "calc", "name": "calculate"})
    call = item(response, "mcp_call")
    assert (call.name, call.output, response.status) == ("calculate", "42", "completed")


def test_tool_choice_code_interpreter_makes_model_run_code(stack: ToolStack) -> None:
    response = run(stack, "stream", input="hello", tools=[CODE_INTERPRETER], tool_choice={"type": "code_interpreter"})
    call = item(response, "code_interpreter_call")
    assert (call.code, call.status) == ("1+1", "completed")
    assert response.output_text.strip() == "The tool python returned: 2"


def test_tool_choice_web_search_makes_model_search(stack: ToolStack) -> None:
    # The Agents SDK's tool_choice="web_search"; openai's Response type has no such choice, so the
    # echo names the tool by its older type.
    response = run(stack, "background", input="harmony", tools=[{"type": "web_search"}],
                   tool_choice={"type": "web_search"})
    call = item(response, "web_search_call")
    assert (call.action.query, call.status) == ("harmony", "completed")
    assert response.tool_choice.type == "web_search_preview"  # type: ignore[union-attr]


def test_tool_choice_naming_mcp_server_not_in_tools_is_bad_request(stack: ToolStack) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        stack.client.responses.create(model=MODEL, input="hello", tools=[WEATHER],
                                      tool_choice={"type": "mcp", "server_label": "calc"})
    assert caught.value.body["param"] == "tool_choice"  # type: ignore[index]


def test_tool_error_fails_call_and_model_continues(stack: ToolStack) -> None:
    response = run(stack, "stream", input="call bad.crash {}", tools=[BAD])
    assert "Error executing tool crash" in error_text(item(response, "mcp_call"))
    assert response.status == "completed" and "Error executing tool crash" in response.output_text


def test_slow_tool_times_out_as_failed_call(stack: ToolStack) -> None:
    started = time.monotonic()
    response = run(stack, "background", input='call bad.sleep {"seconds": 30}', tools=[BAD])
    assert time.monotonic() - started < CALL_TIMEOUT_S + 3
    assert "timed out" in error_text(item(response, "mcp_call"))
    assert response.status == "completed"


def test_max_tool_calls_refuses_call_beyond_limit(stack: ToolStack) -> None:
    twice = 'call calc.calculate {"expression": "1+1"} call calc.calculate {"expression": "2+2"}'
    response = run(stack, "stream", input=twice, tools=[CALC], max_tool_calls=1)
    calls = [i for i in response.output if i.type == "mcp_call"]
    assert [c.status for c in calls] == ["completed", "failed"]
    assert calls[0].output == "2" and "max_tool_calls" in error_text(calls[1])
    assert response.status == "completed" and response.max_tool_calls == 1


# --- refused servers: a 400 before anything is stored -------------------------------------------


@pytest.mark.parametrize(("tool", "param", "says"), [
    ({"type": "mcp", "server_label": "other", "server_url": f"{REFUSED_PREFIX}mcp"}, "tools[0].server_url",
     "loopback or private"),
    ({"type": "mcp", "server_label": "elsewhere", "server_url": "https://mcp.example.com/mcp"},
     "tools[0].server_url", "allow-list"),
    ({"type": "mcp", "server_label": "unknown"}, "tools[0].server_url", "no MCP server is configured"),
    ({"type": "web_search_preview"}, "tools[0].type", "no tool server is configured"),
])
def test_refused_tool_server_is_bad_request_and_stores_nothing(
    stack: ToolStack, tool: dict[str, Any], param: str, says: str
) -> None:
    before = row_count(stack)
    with pytest.raises(openai.BadRequestError) as raised:
        stack.client.responses.create(model=MODEL, input="hello", tools=[tool], background=True)
    error = raised.value.body
    assert isinstance(error, dict) and error["param"] == param and says in error["message"]
    assert row_count(stack) == before


# --- cancel ------------------------------------------------------------------------------------


def test_cancel_during_tool_call_ends_stream(stack: ToolStack) -> None:
    stream = stack.client.responses.create(model=MODEL, input='call bad.sleep {"seconds": 30}', tools=[BAD],
                                           background=True, stream=True)
    events = []
    for event in stream:
        events.append(event)
        if event.type == "response.mcp_call_arguments.done":  # the tool runs from here
            break
    cancelled = stack.client.responses.cancel(events[0].response.id)
    assert cancelled.status == "cancelled"
    events += list(stream)  # the open stream ends too
    # Not timed: uncancelled, the call would time out (CALL_TIMEOUT_S) and the response complete.
    assert not any(e.type in ("response.completed", "response.failed", "response.mcp_call.failed") for e in events)
    check_events(stack.client, events, None)
    assert wait_ended(stack.client, cancelled.id).status == "cancelled"
