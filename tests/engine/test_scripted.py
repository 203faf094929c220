"""The scripted engine: each documented behaviour, on prompts rendered by harmony as the worker renders them."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from openai_harmony import (
    Author,
    Conversation,
    HarmonyEncoding,
    Message,
    Role,
    StreamableParser,
    SystemContent,
)
from support.engines import streamed

from oss_responses.engine import scripted
from oss_responses.engine.base import EngineOutput, SamplingSettings
from oss_responses.engine.scripted import ScriptedEngine, ScriptWriter, parse_prompt
from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.harmony.render import RenderOptions, forced_call_header, render_prompt
from oss_responses.requests import parse_create_request
from oss_responses.vocab import load_encoding

REPO = Path(__file__).resolve().parents[2]
RETURN, CALL = 200002, 200012


@pytest.fixture(scope="module")
def enc() -> HarmonyEncoding:
    return load_encoding(REPO / "var" / "tiktoken")


def prompt(enc: HarmonyEncoding, *users: str, tool_result: tuple[str, str] | None = None) -> list[int]:
    messages = [Message.from_role_and_content(Role.SYSTEM, SystemContent.new())]
    for index, text in enumerate(users):
        messages.append(Message.from_role_and_content(Role.USER, text))
        if index < len(users) - 1:
            messages.append(Message.from_role_and_content(Role.ASSISTANT, "ok").with_channel("final"))
    if tool_result is not None:
        name, output = tool_result
        messages.append(
            Message.from_author_and_content(Author.new(Role.TOOL, name), output)
            .with_channel("commentary")
            .with_recipient("assistant")
        )
    return enc.render_conversation_for_completion(Conversation.from_messages(messages), Role.ASSISTANT)


def sampling(enc: HarmonyEncoding, max_tokens: int = 10_000) -> SamplingSettings:
    return SamplingSettings(max_tokens=max_tokens, stop_token_ids=enc.stop_tokens_for_assistant_actions())


async def collect(
    engine: ScriptedEngine, request_id: str, tokens: list[int], params: SamplingSettings
) -> list[EngineOutput]:
    return [output async for output in engine.generate(request_id, tokens, params)]


def generate(enc: HarmonyEncoding, tokens: list[int], max_tokens: int = 10_000) -> list[EngineOutput]:
    return asyncio.run(collect(ScriptedEngine(enc), "r1", tokens, sampling(enc, max_tokens)))


def messages_of(enc: HarmonyEncoding, outputs: list[EngineOutput]) -> list[Message]:
    parser = StreamableParser(enc, Role.ASSISTANT)
    for output in outputs:
        for token in output.token_ids:
            parser.process(token)
    return parser.messages


def text(message: Message) -> str:
    return "".join(part.text for part in message.content)  # type: ignore[union-attr]


def test_generate_answers_analysis_then_final_quoting_user(enc: HarmonyEncoding) -> None:
    outputs = generate(enc, prompt(enc, "hello there"))
    analysis, final = messages_of(enc, outputs)
    assert (analysis.channel, final.channel) == ("analysis", "final")
    assert text(final) == 'You said: "hello there".'


def test_generate_lists_earlier_user_messages_in_order(enc: HarmonyEncoding) -> None:
    final = messages_of(enc, generate(enc, prompt(enc, "first", "second", "third")))[-1]
    assert text(final) == 'You said: "third". Earlier you said: 1. "first" 2. "second"'


def test_generate_calls_function_with_constrained_json(enc: HarmonyEncoding) -> None:
    outputs = generate(enc, prompt(enc, 'call functions.get_weather {"city": "Paris"}'))
    call = messages_of(enc, outputs)[-1]
    expected = ("commentary", "functions.get_weather", "<|constrain|>json")
    assert (call.channel, call.recipient, call.content_type) == expected
    assert json.loads(text(call)) == {"city": "Paris"}
    assert outputs[-1].token_ids == [CALL] and outputs[-1].finish_reason == "stop"


def test_generate_calls_mcp_tool_of_a_server_label(enc: HarmonyEncoding) -> None:
    call = messages_of(enc, generate(enc, prompt(enc, 'please call calc.add {"a":1,"b":2}')))[-1]
    assert (call.channel, call.recipient) == ("commentary", "calc.add")
    assert json.loads(text(call)) == {"a": 1, "b": 2}


def test_generate_calls_python_on_analysis_with_code(enc: HarmonyEncoding) -> None:
    call = messages_of(enc, generate(enc, prompt(enc, "call python 123*456")))[-1]
    assert (call.channel, call.recipient, text(call)) == ("analysis", "python", "123*456")


def test_generate_answers_exactly_n_tokens(enc: HarmonyEncoding) -> None:
    outputs = generate(enc, prompt(enc, "give me tokens 37 please"))
    tokens = [t for o in outputs for t in o.token_ids]
    final_start = len(tokens) - 1 - tokens[::-1].index(200008)  # the last <|message|>
    assert len(tokens[final_start + 1 : -1]) == 37 and tokens[-1] == RETURN


def test_generate_quotes_tool_result(enc: HarmonyEncoding) -> None:
    result = ("functions.get_weather", '{"temp": 20}')
    tokens = prompt(enc, 'call functions.get_weather {"city": "Paris"}', tool_result=result)
    final = messages_of(enc, generate(enc, tokens))[-1]
    assert final.channel == "final"
    assert text(final) == 'The tool functions.get_weather returned: {"temp": 20}'


def test_generate_includes_stop_token_once_at_the_end(enc: HarmonyEncoding) -> None:
    outputs = generate(enc, prompt(enc, "hi"))
    assert all(len(o.token_ids) == 1 for o in outputs)
    assert outputs[-1].token_ids == [RETURN] and outputs[-1].finished
    assert not any(o.finished for o in outputs[:-1])


def test_script_writer_works_out_a_repeated_prompt_once(enc: HarmonyEncoding, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[int] = []
    monkeypatch.setattr(scripted, "parse_prompt", lambda *args: parsed.append(1) or parse_prompt(*args))
    writer, tokens = ScriptWriter(enc), prompt(enc, "hello there")

    first = writer.script_for(tokens)
    first.clear()  # a caller's copy: changing it changes nothing remembered

    assert writer.script_for(tokens) == ScriptWriter(enc).tokens_for(parse_prompt(enc, tokens))
    assert len(parsed) == 1


def test_script_writer_works_out_a_long_prompt_every_time(
    enc: HarmonyEncoding, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[int] = []
    monkeypatch.setattr(scripted, "parse_prompt", lambda *args: parsed.append(1) or parse_prompt(*args))
    tokens = prompt(enc, "hello there")
    writer = ScriptWriter(enc, remembered_tokens=len(tokens) - 1)

    assert writer.script_for(tokens) == writer.script_for(tokens)
    assert len(parsed) == 2


def test_generate_stops_at_max_tokens_with_length(enc: HarmonyEncoding) -> None:
    outputs = generate(enc, prompt(enc, "tokens 100"), max_tokens=12)
    assert sum(len(o.token_ids) for o in outputs) == 12
    assert outputs[-1].finish_reason == "length"


def test_abort_ends_generation_without_waiting_out_the_step(enc: HarmonyEncoding) -> None:
    async def scenario() -> list[EngineOutput]:
        engine = ScriptedEngine(enc, tokens_per_second=0.01)  # a 100 s step: only the abort can end it
        task = asyncio.create_task(collect(engine, "r1", prompt(enc, "tokens 50"), sampling(enc)))
        while engine.running == 0:
            await asyncio.sleep(0)
        await engine.abort("r1")
        return await asyncio.wait_for(task, timeout=10)

    assert asyncio.run(scenario())[-1].finish_reason == "abort"


def test_step_clock_emits_one_token_per_running_request_per_step(enc: HarmonyEncoding) -> None:
    async def scenario() -> list[list[int]]:
        engine = ScriptedEngine(enc, step_interval_seconds=0.02)
        clock = engine.clock
        assert clock is not None
        steps: list[list[int]] = [[], [], []]  # the clock's step at each request's tokens

        async def run(index: int) -> None:
            async for _ in engine.generate(f"r{index}", prompt(enc, "tokens 10"), sampling(enc, max_tokens=10)):
                steps[index].append(clock.steps)

        await asyncio.gather(*(run(i) for i in range(3)))
        return steps

    steps = asyncio.run(scenario())
    assert steps[0] == steps[1] == steps[2] == list(range(1, 11))


def test_tokens_per_second_paces_each_response(enc: HarmonyEncoding, monkeypatch: pytest.MonkeyPatch) -> None:
    # What each token waits is read from the waits themselves; the wall clock only bounds them from
    # below, since a busy machine may wake a timer late but never early.
    real_wait, waited = asyncio.wait, []

    async def recorded_wait(aws: Any, *, timeout: float | None = None) -> Any:
        waited.append(timeout)
        return await real_wait(aws, timeout=timeout)

    async def scenario() -> float:
        engine = ScriptedEngine(enc, tokens_per_second=100.0)
        started = time.monotonic()
        await collect(engine, "r1", prompt(enc, "tokens 30"), sampling(enc, max_tokens=20))
        return time.monotonic() - started

    monkeypatch.setattr(asyncio, "wait", recorded_wait)
    assert asyncio.run(scenario()) >= 0.19
    assert waited == [0.01] * 20


def rendered(enc: HarmonyEncoding, text_format: dict[str, Any], user: str = "list two steps") -> list[int]:
    request = parse_create_request(
        {"model": "m", "input": user, "instructions": "Be brief.", "text": {"format": text_format}}
    )
    return render_prompt(request, [], RenderOptions(conversation_start_date="2024-01-01"), enc).token_ids


STEPS_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["steps", "final_answer"],
    "properties": {
        "steps": {"type": "array", "minItems": 2, "items": {"$ref": "#/$defs/step"}},
        "final_answer": {"type": "string", "enum": ["yes", "no"]},
    },
    "$defs": {"step": {"type": "object", "additionalProperties": False, "required": ["explanation"],
                       "properties": {"explanation": {"type": "string"}}}},
}


def test_generate_answers_instance_of_json_schema_on_final(enc: HarmonyEncoding) -> None:
    tokens = rendered(enc, {"type": "json_schema", "name": "steps", "strict": True, "schema": STEPS_SCHEMA})
    analysis, final = messages_of(enc, generate(enc, tokens))
    assert (analysis.channel, final.channel) == ("analysis", "final")
    jsonschema.validate(json.loads(text(final)), STEPS_SCHEMA)


def test_generate_answers_json_object_when_asked(enc: HarmonyEncoding) -> None:
    final = messages_of(enc, generate(enc, rendered(enc, {"type": "json_object"}, user="hi, in JSON")))[-1]
    assert json.loads(text(final)) == {"answer": "hi, in JSON"}


def test_generate_answers_in_requested_format_after_tool_result(enc: HarmonyEncoding) -> None:
    # On vLLM the format constrains every final answer, so the scripted answer to a tool result obeys it too.
    request = parse_create_request({
        "model": "m", "text": {"format": {"type": "json_object"}},
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "input": [
            {"role": "user", "content": "call functions.f {} and answer in json"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
        ],
    })
    tokens = render_prompt(request, [], RenderOptions(conversation_start_date="2024-01-01"), enc).token_ids
    final = messages_of(enc, generate(enc, tokens))[-1]
    assert json.loads(text(final)) == {"answer": "The tool functions.f returned: 42"}


def test_generate_answers_in_requested_format_despite_developer_message_in_input(enc: HarmonyEncoding) -> None:
    # Codex CLI sends its instructions as a developer message of the input, after the renderer's.
    request = parse_create_request({
        "model": "m", "text": {"format": {"type": "json_object"}},
        "input": [{"role": "developer", "content": "Be nice. Answer in JSON."}, {"role": "user", "content": "hi"}],
    })
    tokens = render_prompt(request, [], RenderOptions(conversation_start_date="2024-01-01"), enc).token_ids
    final = messages_of(enc, generate(enc, tokens))[-1]
    assert json.loads(text(final)) == {"answer": "hi"}


FUNCTIONS = [{"type": "function", "name": name, "parameters": {"type": "object"}} for name in ("first", "spell")]


def forced(enc: HarmonyEncoding, user: str, choice: object) -> tuple[list[int], list[int]]:
    """The rendered prompt with the forced start of a call the worker writes, and that start."""
    request = parse_create_request({"model": "m", "input": user, "tools": FUNCTIONS, "tool_choice": choice})
    header = enc.encode(forced_call_header(request, {}), allowed_special="all")
    tokens = render_prompt(request, [], RenderOptions(conversation_start_date="2024-01-01"), enc).token_ids
    return tokens + header, header


@pytest.mark.parametrize(("user", "choice", "call"), [
    ('call functions.spell {"w": 1}', {"type": "function", "name": "spell"}, ("spell", '{"w": 1}')),
    ("hello", {"type": "function", "name": "spell"}, ("spell", "{}")),
    ('call functions.spell {"w": 2}', "required", ("spell", '{"w": 2}')),
    ("hello", "required", ("first", "{}")),
])
def test_generate_completes_forced_call(enc: HarmonyEncoding, user: str, choice: object, call: tuple) -> None:
    tokens, header = forced(enc, user, choice)
    rest = [t for output in generate(enc, tokens) for t in output.token_ids]
    [message] = enc.parse_messages_from_completion_tokens(header + rest, Role.ASSISTANT)
    assert (message.recipient, text(message)) == (f"functions.{call[0]}", call[1]) and rest[-1] == CALL


def test_generate_required_call_names_function_with_hyphen(enc: HarmonyEncoding) -> None:
    tools = [{"type": "function", "name": "get-weather", "parameters": {"type": "object"}}]
    request = parse_create_request({"model": "m", "input": "hello", "tools": tools, "tool_choice": "required"})
    header = enc.encode(forced_call_header(request, {}), allowed_special="all")
    tokens = render_prompt(request, [], RenderOptions(conversation_start_date="2024-01-01"), enc).token_ids + header
    rest = [t for output in generate(enc, tokens) for t in output.token_ids]
    [message] = enc.parse_messages_from_completion_tokens(header + rest, Role.ASSISTANT)
    assert (message.recipient, text(message)) == ("functions.get-weather", "{}")


def test_generate_fills_forced_call_from_its_signature(enc: HarmonyEncoding) -> None:
    parameters = {"type": "object", "required": ["city", "days"],
                  "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"type": "string"}}}
    tools = [{"type": "function", "name": "forecast", "parameters": parameters}]
    request = parse_create_request({"model": "m", "input": "Paris", "tools": tools, "tool_choice": "required"})
    header = enc.encode(forced_call_header(request, {}), allowed_special="all")
    tokens = render_prompt(request, [], RenderOptions(conversation_start_date="2024-01-01"), enc).token_ids + header
    rest = [t for output in generate(enc, tokens) for t in output.token_ids]
    [message] = enc.parse_messages_from_completion_tokens(header + rest, Role.ASSISTANT)
    assert (message.recipient, json.loads(text(message))) == ("functions.forecast", {"city": "Paris", "days": 0})


MCP_TOOLS = [{"type": "mcp", "server_label": "calc"}, {"type": "code_interpreter", "container": {"type": "auto"}},
             {"type": "web_search_preview"}]
CALC_TOOLS = {"calc": [McpToolSpec("add", "Add", {"type": "object"}),
                       McpToolSpec("mul", "Multiply", {"type": "object"})]}


def forced_other(enc: HarmonyEncoding, user: str, choice: object) -> tuple[list[int], list[int]]:
    """As ``forced``, for a request with an MCP server and the two built-ins."""
    request = parse_create_request({"model": "m", "input": user, "tools": MCP_TOOLS, "tool_choice": choice})
    header = enc.encode(forced_call_header(request, {}), allowed_special="all")
    options = RenderOptions(conversation_start_date="2024-01-01", mcp_tools=CALC_TOOLS)
    return render_prompt(request, [], options, enc).token_ids + header, header


@pytest.mark.parametrize(("user", "choice", "call"), [
    ('call calc.mul {"a": 2}', {"type": "mcp", "server_label": "calc"}, ("calc.mul", '{"a": 2}')),
    ("hello", {"type": "mcp", "server_label": "calc"}, ("calc.add", "{}")),
    ('call calc.mul {"a": 2}', {"type": "mcp", "server_label": "calc", "name": "mul"}, ("calc.mul", '{"a": 2}')),
    ("hello", {"type": "mcp", "server_label": "calc", "name": "mul"}, ("calc.mul", "{}")),
    ('call calc.mul {"a": 2} call python 6*7', {"type": "code_interpreter"}, ("python", "6*7")),
    ("hello", {"type": "code_interpreter"}, ("python", "1+1")),
    ("hello", {"type": "web_search_preview"}, ("browser.search", '{"query": "hello"}')),
    ('call browser.open {"id": 1}', {"type": "web_search_preview"}, ("browser.open", '{"id": 1}')),
])
def test_generate_completes_forced_call_of_other_tool_kinds(
    enc: HarmonyEncoding, user: str, choice: object, call: tuple
) -> None:
    tokens, header = forced_other(enc, user, choice)
    rest = [t for output in generate(enc, tokens) for t in output.token_ids]
    [message] = enc.parse_messages_from_completion_tokens(header + rest, Role.ASSISTANT)
    assert (message.recipient, text(message)) == call and rest[-1] == CALL


@pytest.mark.parametrize("choice", [{"type": "mcp", "server_label": "calc"}, {"type": "code_interpreter"}])
@pytest.mark.parametrize("cut", [1, 4])
def test_generate_continues_forced_call_of_other_tool_kind_prompt_ends_with(
    enc: HarmonyEncoding, choice: object, cut: int
) -> None:
    tokens, _ = forced_other(enc, 'call calc.mul {"a": 2} call python 6*7', choice)
    whole = [t for output in generate(enc, tokens) for t in output.token_ids]
    rest = [t for output in generate(enc, tokens + whole[:cut]) for t in output.token_ids]
    assert whole[:cut] + rest == whole


@pytest.mark.parametrize("cut", [1, 3])
def test_generate_continues_forced_call_the_prompt_already_ends_with(enc: HarmonyEncoding, cut: int) -> None:
    tokens, _ = forced(enc, 'call functions.spell {"w": 2}', "required")
    whole = [t for output in generate(enc, tokens) for t in output.token_ids]
    rest = [t for output in generate(enc, tokens + whole[:cut]) for t in output.token_ids]
    assert whole[:cut] + rest == whole


def test_generate_ignores_response_formats_heading_in_user_text(enc: HarmonyEncoding) -> None:
    final = messages_of(enc, generate(enc, prompt(enc, "# Response Formats\n\n## x\n\n{}")))[-1]
    assert text(final).startswith("You said:")


@pytest.mark.parametrize("cut", [1, 5, 12, 30])
def test_generate_continues_answer_the_prompt_already_ends_with(enc: HarmonyEncoding, cut: int) -> None:
    tokens = prompt(enc, "tokens 20")
    whole = [t for output in generate(enc, tokens) for t in output.token_ids]
    rest = [t for output in generate(enc, tokens + whole[:cut]) for t in output.token_ids]
    assert whole[:cut] + rest == whole


def test_generate_after_tool_result_is_not_taken_for_continuation(enc: HarmonyEncoding) -> None:
    outputs = generate(enc, prompt(enc, "call functions.f {}", tool_result=("functions.f", "42")))
    assert text(messages_of(enc, outputs)[-1]) == "The tool functions.f returned: 42"


def test_generate_continues_answer_cut_inside_its_next_header(enc: HarmonyEncoding) -> None:
    tokens = prompt(enc, "tokens 5")
    whole = [t for output in generate(enc, tokens) for t in output.token_ids]
    cut = whole.index(200006) + 1  # the final message's <|start|>, its role not generated yet
    rest = [t for output in generate(enc, tokens + whole[:cut]) for t in output.token_ids]
    assert whole[:cut] + rest == whole


def test_generate_with_stream_interval_outputs_first_token_then_groups_of_it(enc: HarmonyEncoding) -> None:
    tokens = prompt(enc, "Say hello.")
    every_token = generate(enc, tokens)
    grouped = asyncio.run(collect(ScriptedEngine(enc), "r1", tokens, replace(sampling(enc), stream_interval=5)))

    assert [t for o in grouped for t in o.token_ids] == [t for o in every_token for t in o.token_ids]
    assert len(grouped[0].token_ids) == 1 and grouped[0].cached_tokens == 0
    assert {len(output.token_ids) for output in grouped[1:-1]} == {5}
    assert grouped[-1].finished and grouped[-1].finish_reason == every_token[-1].finish_reason


def test_generate_with_stream_interval_hands_over_held_tokens_when_aborted(enc: HarmonyEncoding) -> None:
    tokens = prompt(enc, "Say hello.")
    script = [t for o in generate(enc, tokens) for t in o.token_ids]

    async def abort_between_outputs() -> list[EngineOutput]:
        engine, outputs = ScriptedEngine(enc), []

        async def abort_two_tokens_later() -> None:
            for _ in range(2):
                await asyncio.sleep(0)  # the engine takes a token per loop iteration
            await engine.abort("r1")

        async for output in engine.generate("r1", tokens, replace(sampling(enc), stream_interval=4)):
            outputs.append(output)
            if len(outputs) == 2:
                aborting = asyncio.ensure_future(abort_two_tokens_later())
        await aborting
        return outputs

    outputs = asyncio.run(abort_between_outputs())

    assert [len(o.token_ids) for o in outputs[:2]] == [1, 4]
    assert outputs[-1].finish_reason == "abort" and 0 < len(outputs[-1].token_ids) < 4
    handed_over = [t for o in outputs for t in o.token_ids]
    assert handed_over == script[: len(handed_over)]


def test_generate_with_stream_interval_hands_over_held_tokens_at_the_length_limit(enc: HarmonyEncoding) -> None:
    limited = replace(sampling(enc, max_tokens=10), stream_interval=4)

    outputs = asyncio.run(collect(ScriptedEngine(enc), "r1", prompt(enc, "Say hello."), limited))

    assert [len(o.token_ids) for o in outputs] == [1, 4, 4, 1]
    assert outputs[-1].finished and outputs[-1].finish_reason == "length"


@pytest.mark.parametrize(
    "params",
    [{}, {"max_tokens": 7}, {"stream_interval": 4}, {"max_tokens": 10, "stream_interval": 4}],
    ids=["stop", "length", "interval", "interval-length"],
)
def test_stream_on_step_clock_outputs_what_generate_outputs(enc: HarmonyEncoding, params: dict[str, int]) -> None:
    settings = replace(sampling(enc), **params)
    tokens = prompt(enc, "Say hello.")
    generated = asyncio.run(collect(ScriptedEngine(enc), "r1", tokens, settings))

    async def scenario() -> list[EngineOutput]:
        return await streamed(ScriptedEngine(enc, step_interval_seconds=0.001), "r1", tokens, settings)

    assert asyncio.run(scenario()) == generated


def test_stream_on_step_clock_steps_every_running_request_once_per_step(enc: HarmonyEncoding) -> None:
    async def scenario() -> list[list[int]]:
        engine = ScriptedEngine(enc, step_interval_seconds=0.02)
        clock = engine.clock
        assert clock is not None
        steps: list[list[int]] = [[], [], []]  # the clock's step at each request's outputs

        async def run(index: int) -> None:
            def on_output(_: EngineOutput) -> None:
                steps[index].append(clock.steps)

            await engine.stream(f"r{index}", prompt(enc, "tokens 10"), sampling(enc, max_tokens=10), on_output)

        await asyncio.gather(*(run(i) for i in range(3)))
        return steps

    assert asyncio.run(scenario()) == [list(range(1, 11))] * 3


def test_stream_on_step_clock_ends_aborted_request_at_next_step(enc: HarmonyEncoding) -> None:
    async def scenario() -> tuple[list[EngineOutput], list[EngineOutput]]:
        engine = ScriptedEngine(enc, step_interval_seconds=0.005)
        kept: list[EngineOutput] = []

        def on_output(output: EngineOutput) -> None:
            kept.append(output)
            if len(kept) == 3:
                asyncio.ensure_future(engine.abort("aborted"))

        other = asyncio.ensure_future(streamed(engine, "other", prompt(enc, "tokens 20"), sampling(enc, max_tokens=20)))
        await engine.stream("aborted", prompt(enc, "tokens 50"), sampling(enc), on_output)
        return kept, await other

    kept, other = asyncio.run(scenario())

    assert [o.finish_reason for o in kept] == [None] * 3 + ["abort"] and kept[-1].token_ids == []
    assert other[-1].finish_reason == "length" and len(other) == 20  # the other request ran on


def test_stream_on_step_clock_raises_what_its_callback_raised_without_stopping_others(enc: HarmonyEncoding) -> None:
    def failing(output: EngineOutput) -> None:
        raise RuntimeError("the callback failed")

    async def scenario() -> list[EngineOutput]:
        engine = ScriptedEngine(enc, step_interval_seconds=0.002)
        other = asyncio.ensure_future(streamed(engine, "other", prompt(enc, "tokens 5"), sampling(enc, max_tokens=5)))
        with pytest.raises(RuntimeError, match="the callback failed"):
            await engine.stream("failing", prompt(enc, "tokens 5"), sampling(enc), failing)
        assert engine.running == 1  # the failed request is gone, the other runs
        return await other

    assert [len(o.token_ids) for o in asyncio.run(scenario())] == [1] * 5


def test_shutdown_ends_requests_streaming_on_step_clock_as_aborted(enc: HarmonyEncoding) -> None:
    async def scenario() -> list[EngineOutput]:
        engine = ScriptedEngine(enc, step_interval_seconds=60.0)  # no step comes by itself
        running = asyncio.ensure_future(streamed(engine, "r1", prompt(enc, "tokens 5"), sampling(enc)))
        while engine.running == 0:
            await asyncio.sleep(0)
        await engine.shutdown()
        return await asyncio.wait_for(running, timeout=10)

    assert [o.finish_reason for o in asyncio.run(scenario())] == ["abort"]


def test_cancelled_stream_on_step_clock_leaves_the_engine(enc: HarmonyEncoding) -> None:
    async def scenario() -> int:
        engine = ScriptedEngine(enc, step_interval_seconds=0.002)
        running = asyncio.ensure_future(streamed(engine, "r1", prompt(enc, "tokens 50"), sampling(enc)))
        while engine.running == 0:
            await asyncio.sleep(0)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        await asyncio.sleep(0.01)  # steps pass: nothing is output to the cancelled request
        return engine.running

    assert asyncio.run(scenario()) == 0
