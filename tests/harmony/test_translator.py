"""Behaviour of ResponseTranslator on the golden transcripts and on hand-made edge cases."""

from __future__ import annotations

import pytest
from openai_harmony import Message
from pydantic import ValidationError
from support.harmony_transcripts import (
    MCP_LABELS,
    SCENARIOS,
    golden_tokens,
    make_response,
    run_scenario,
)

from oss_responses.harmony.lifecycle import validate_response
from oss_responses.harmony.translator import ResponseTranslator, opening_events


def _types(run) -> list[str]:
    return [event.type for event in run.events]


def _translator(encoding, background: bool = False) -> ResponseTranslator:
    response = make_response(background)
    return ResponseTranslator(
        response, encoding=encoding, first_sequence_number=len(opening_events(response)), mcp_labels=MCP_LABELS
    )


def test_mcp_python_call_streams_as_one_mcp_call_item(encoding) -> None:
    run = run_scenario(encoding, SCENARIOS["mcp_code_interpreter"])
    output = run.translator.response.output
    assert [item.type for item in output] == ["reasoning", "mcp_call", "reasoning", "message"]
    call = output[1]
    assert (call.server_label, call.name, call.arguments, call.output, call.status) == (
        "code_interpreter", "python", "123*456\n", "56088\n", "completed"
    )
    mcp_types = [t for t in _types(run) if "mcp" in t]
    # OpenAI's order: in progress once added, the arguments streaming after.
    assert mcp_types == [
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
    ]
    assert not any("code_interpreter_call" in t or "web_search_call" in t for t in _types(run))
    assert "56088" in output[3].content[0].text


def test_mcp_call_fails_with_structured_error(encoding) -> None:
    translator = _translator(encoding)
    translator.start()
    translator.feed(golden_tokens(encoding, "mcp_code_interpreter.1"))
    events = translator.feed_tool_result(None, "ZeroDivisionError")
    assert [e.type for e in events] == ["response.mcp_call.failed", "response.output_item.done"]
    item = events[-1].item
    assert item.status == "failed" and item.error.type == "mcp_tool_execution_error"
    assert translator.output_messages[-1]["role"] == "tool"


def test_pending_tool_call_describes_mcp_call(encoding) -> None:
    translator = _translator(encoding)
    translator.start()
    translator.feed(golden_tokens(encoding, "mcp_code_interpreter.1"))
    call = translator.pending_tool_call
    assert (call.kind, call.server_label, call.name, call.arguments) == (
        "mcp", "code_interpreter", "python", "123*456\n"
    )
    assert call.item_id.startswith("mcp_")


def test_continuation_renders_tool_message_and_assistant_start(encoding) -> None:
    run = run_scenario(encoding, SCENARIOS["mcp_code_interpreter"])
    text = encoding.decode(run.continuations[0])
    assert text == "<|start|>python to=assistant<|channel|>analysis<|message|>56088\n<|end|><|start|>assistant"


def test_namespace_function_call_is_function_call_with_namespace(encoding) -> None:
    translator = ResponseTranslator(
        make_response(), encoding=encoding, first_sequence_number=1, function_namespaces=frozenset({"agents"})
    )
    translator.start()
    tokens = encoding.encode(
        '<|channel|>commentary to=agents.spawn <|constrain|>json<|message|>{"task": "x"}<|call|>', allowed_special="all"
    )
    translator.feed(tokens)
    translator.finish("stop")
    call = translator.response.output[0]
    assert (call.type, call.namespace, call.name, call.arguments) == (
        "function_call", "agents", "spawn", '{"task": "x"}'
    )
    assert translator.function_calls == {call.call_id: "agents.spawn"}
    assert translator.pending_tool_call.recipient == "agents.spawn"


def test_function_call_keeps_one_call_id(encoding) -> None:
    run = run_scenario(encoding, SCENARIOS["function_call"])
    added = [e.item for e in run.events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    done = [e.item for e in run.events if e.type == "response.output_item.done" and e.item.type == "function_call"]
    assert done[0].call_id == added[0].call_id and done[0].id == added[0].id
    assert done[0].call_id.startswith("call_") and done[0].id.startswith("fc_")
    assert (done[0].name, done[0].arguments) == ("get_weather", '{"city": "Paris"}')
    assert run.translator.function_calls == {done[0].call_id: "get_weather"}
    assert run.translator.pending_tool_call.kind == "function"
    assert run.translator.response.status == "completed"


def test_function_call_cut_short_is_a_call_an_output_may_answer(encoding) -> None:
    """The cut call stays in the conversation (its message is stored): its call_id is the conversation's, so
    a client that answers every function_call item was not refused ("No tool call found")."""
    translator = ResponseTranslator(make_response(), encoding=encoding, first_sequence_number=1)
    translator.start()
    tokens = golden_tokens(encoding, "function_call")
    translator.feed(tokens[: tokens.index(encoding.encode("<|call|>", allowed_special="all")[0]) - 2])
    translator.finish("length")
    [call] = [item for item in translator.response.output if item.type == "function_call"]
    assert call.status == "incomplete"
    assert translator.function_calls == {call.call_id: "get_weather"}


def test_reasoning_streams_reasoning_text_events_only(encoding) -> None:
    types = _types(run_scenario(encoding, SCENARIOS["reasoning_final"]))
    assert "response.reasoning_text.delta" in types and "response.reasoning_text.done" in types
    assert not any(t.startswith("response.reasoning_part") or "summary" in t for t in types)


def test_preamble_becomes_commentary_message(encoding) -> None:
    output = run_scenario(encoding, SCENARIOS["preamble"]).translator.response.output
    assert [item.type for item in output] == ["reasoning", "message", "function_call"]
    assert output[1].phase == "commentary" and output[1].content[0].text == "Let me look that up for you."


def test_length_cut_mid_message_gives_incomplete(encoding) -> None:
    run = run_scenario(encoding, SCENARIOS["max_output_tokens"])
    response = run.translator.response
    assert run.events[-1].type == "response.incomplete"
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[-1].status == "incomplete"
    assert response.output[-1].content[0].text.startswith("Once upon a time")


def test_invalid_tokens_fail_response(encoding) -> None:
    run = run_scenario(encoding, SCENARIOS["invalid"])
    response = run.translator.response
    assert run.events[-1].type == "response.failed"
    assert response.status == "failed" and response.error.code == "server_error"
    assert response.output[0].content[0].text == "Hi."


def _call(encoding, recipient: str) -> list[int]:
    return encoding.encode(f"<|channel|>commentary to={recipient}<|message|>{{}}<|call|>", allowed_special="all")


def test_unknown_recipient_is_pending_as_unavailable_without_item(encoding) -> None:
    translator = _translator(encoding)
    translator.start()
    assert translator.feed(_call(encoding, "nowhere.tool")) == []
    call = translator.pending_tool_call
    assert (call.kind, call.recipient, call.arguments) == ("unavailable", "nowhere.tool", "{}")
    assert translator.response.status == "in_progress"


def test_unknown_recipient_answer_lets_the_model_continue(encoding) -> None:
    translator = _translator(encoding)
    translator.start()
    translator.feed(_call(encoding, "nowhere.tool"))
    translator.feed_tool_result(None, "There is no tool 'nowhere.tool'")
    assert encoding.decode(translator.continuation_token_ids()) == (
        "<|start|>nowhere.tool to=assistant<|channel|>commentary<|message|>There is no tool 'nowhere.tool'<|end|>"
        "<|start|>assistant"
    )
    events = translator.feed(encoding.encode("<|channel|>final<|message|>Sorry.<|return|>", allowed_special="all"))
    events += translator.finish("stop")
    assert events[-1].type == "response.completed"
    assert [item.type for item in translator.response.output] == ["message"]
    assert translator.response.output[0].content[0].text == "Sorry."


def _offering(encoding, offered: frozenset[str], namespaces: frozenset[str] = frozenset()) -> ResponseTranslator:
    translator = ResponseTranslator(
        make_response(), encoding=encoding, first_sequence_number=1, function_namespaces=namespaces,
        offered_functions=offered,
    )
    translator.start()
    return translator


def test_function_not_offered_is_pending_as_unavailable_without_item(encoding) -> None:
    translator = _offering(encoding, frozenset({"functions.get_weather"}))
    assert translator.feed(_call(encoding, "functions.get_time")) == []  # no item
    call = translator.pending_tool_call
    assert (call.kind, call.recipient) == ("unavailable", "functions.get_time")
    assert translator.function_calls == {}


def test_offered_function_is_a_function_call_item(encoding) -> None:
    translator = _offering(encoding, frozenset({"functions.get_weather"}))
    done = translator.feed(_call(encoding, "functions.get_weather"))[-1]
    assert translator.pending_tool_call.kind == "function"
    assert (done.type, done.item.type, done.item.name) == ("response.output_item.done", "function_call", "get_weather")


def test_namespace_function_not_offered_is_unavailable(encoding) -> None:
    translator = _offering(encoding, frozenset({"crm.lookup"}), namespaces=frozenset({"crm"}))
    assert translator.feed(_call(encoding, "crm.delete")) == []
    assert translator.pending_tool_call.kind == "unavailable"


def test_nothing_offered_makes_every_function_call_unavailable(encoding) -> None:
    translator = _offering(encoding, frozenset())  # tool_choice "none"
    assert translator.feed(_call(encoding, "functions.get_weather")) == []
    assert translator.pending_tool_call.kind == "unavailable"


def test_request_without_tools_completes(encoding) -> None:
    response = make_response()
    translator = ResponseTranslator(response, encoding=encoding, first_sequence_number=1)
    translator.start()
    translator.feed(golden_tokens(encoding, "no_tools"))
    events = translator.finish("stop")
    assert events[-1].type == "response.completed"
    assert translator.response.output[0].content[0].text == "Paris is the capital of France."


def test_completed_at_is_never_before_created_at_when_worker_clock_is_behind(encoding) -> None:
    # The API stamps created_at, the worker completed_at, each by its own host's clock: a worker 10 minutes
    # behind stated a completion 599 s before the creation (the clock probe).
    response = make_response()
    translator = ResponseTranslator(response, encoding=encoding, first_sequence_number=1)
    translator.start()
    translator.feed(golden_tokens(encoding, "no_tools"))
    translator.finish("stop", completed_at=int(response.created_at) - 600)
    assert translator.response.completed_at == int(response.created_at)


def test_usage_counts_input_cached_output_and_reasoning(encoding) -> None:
    run = run_scenario(encoding, SCENARIOS["reasoning_final"])
    usage = run.translator.response.usage
    tokens = golden_tokens(encoding, "reasoning_final")
    analysis_tokens = tokens.index(200007) + 1  # header through <|end|>
    assert (usage.input_tokens, usage.input_tokens_details.cached_tokens) == (50, 10)
    assert usage.output_tokens == len(tokens)
    assert usage.output_tokens_details.reasoning_tokens == analysis_tokens
    assert usage.total_tokens == 50 + len(tokens)


def test_usage_cached_tokens_never_exceed_input_tokens(encoding) -> None:
    """vLLM counts its cache over all it was given: a forced call's header follows the prompt (126 input
    tokens reported 128 cached)."""
    translator = ResponseTranslator(make_response(), encoding=encoding, first_sequence_number=1, input_tokens=126)
    translator.start()
    translator.feed(golden_tokens(encoding, "no_tools"))
    translator.finish("stop", cached_tokens=128)
    assert translator.response.usage.input_tokens_details.cached_tokens == 126


def test_usage_counts_reasoning_cut_short_as_reasoning(encoding) -> None:
    # max_output_tokens reached while the model still reasons: what it generated was reasoning.
    translator = _translator(encoding)
    translator.start()
    translator.feed(golden_tokens(encoding, "reasoning_final")[:9])
    translator.finish("length")
    usage = translator.response.usage
    assert translator.response.status == "incomplete"
    assert usage.output_tokens == usage.output_tokens_details.reasoning_tokens == 9


def test_opening_events_for_background_are_created_then_queued(encoding) -> None:
    events = opening_events(make_response(background=True))
    assert [(e.type, e.sequence_number, e.response.status) for e in events] == [
        ("response.created", 0, "queued"),
        ("response.queued", 1, "queued"),
    ]


def test_opening_events_for_foreground_are_created_only(encoding) -> None:
    assert [e.type for e in opening_events(make_response())] == ["response.created"]


def test_abort_cancels_without_terminal_event(encoding) -> None:
    translator = _translator(encoding)
    translator.start()
    translator.feed(golden_tokens(encoding, "max_output_tokens"))
    events = translator.finish("abort")
    assert [e.type for e in events][-1] == "response.output_item.done"
    assert translator.response.status == "cancelled"


def test_feed_after_terminal_emits_nothing(encoding) -> None:
    run = run_scenario(encoding, SCENARIOS["no_tools"])
    assert run.translator.feed(golden_tokens(encoding, "no_tools")) == []
    assert run.translator.finish("stop") == []
    assert run.translator.fail("late", "server_error") == []


def test_fail_closes_open_items_and_emits_failed(encoding) -> None:
    translator = _translator(encoding)
    translator.start()
    translator.feed(golden_tokens(encoding, "max_output_tokens"))
    events = translator.fail("engine crashed", "server_error")
    assert [e.type for e in events][-1] == "response.failed"
    assert translator.response.error.message == "engine crashed"
    assert all(item.status == "incomplete" for item in translator.response.output[1:])


def test_unterminated_final_message_at_stop_completes(encoding) -> None:
    translator = _translator(encoding)
    translator.start()
    translator.feed(encoding.encode("<|channel|>final<|message|>Done", allowed_special="all"))
    events = translator.finish("stop")
    assert events[-1].type == "response.completed"
    assert translator.response.output[0].content[0].text == "Done"


def test_output_messages_match_harmony_parse_of_generated_tokens(encoding) -> None:
    run = run_scenario(encoding, SCENARIOS["mcp_code_interpreter"])
    generated = encoding.encode("<|start|>assistant", allowed_special="all")
    generated += golden_tokens(encoding, "mcp_code_interpreter.1")
    generated += run.continuations[0] + golden_tokens(encoding, "mcp_code_interpreter.2")
    parsed = encoding.parse_messages_from_completion_tokens(generated)
    assert run.translator.output_messages == [message.to_dict() for message in parsed]


def test_output_messages_survive_render_and_parse(encoding) -> None:
    stored = run_scenario(encoding, SCENARIOS["function_call"]).translator.output_messages
    rendered = [t for m in stored for t in encoding.render(Message.from_dict(m))]
    assert [m.to_dict() for m in encoding.parse_messages_from_completion_tokens(rendered)] == stored


def test_multibyte_text_split_across_chunks_is_whole(encoding) -> None:
    translator = _translator(encoding)
    translator.start()
    tokens = encoding.encode("<|channel|>final<|message|>日本語 😊🎉 ok<|return|>", allowed_special="all")
    deltas = "".join(e.delta for t in tokens for e in translator.feed([t]) if e.type.endswith(".delta"))
    translator.finish("stop")
    assert deltas == "日本語 😊🎉 ok" == translator.response.output[0].content[0].text


@pytest.mark.parametrize(("code", "kind"), [("server_error", "server_error"),
                                           ("invalid_prompt", "invalid_request_error"),
                                           ("context_length_exceeded", "invalid_request_error")])
def test_failed_response_error_has_a_type(encoding, code: str, kind: str) -> None:
    # The Vercel AI SDK refuses a Response whose error has no type ("Invalid JSON response", the message lost).
    translator = _translator(encoding)
    translator.start()
    translator.fail("the prompt is too long", code)
    error = translator.response.error
    assert (error.code, error.type, error.message) == (code, kind, "the prompt is too long")


def test_failed_response_with_openai_code_beyond_types_serialises_and_validates_back(encoding) -> None:
    translator = _translator(encoding)
    translator.start()
    [failed] = translator.fail("Your input exceeds the context window of this model.", "context_length_exceeded")
    stored = failed.response.model_dump(mode="json", warnings="error")
    assert stored["error"]["code"] == "context_length_exceeded"
    assert validate_response(stored).error == translator.response.error


def test_validate_response_with_code_beyond_types_still_validates_the_rest(encoding) -> None:
    translator = _translator(encoding)
    translator.start()
    translator.fail("too long", "context_length_exceeded")
    stored = translator.response.model_dump(mode="json")
    with pytest.raises(ValidationError):
        validate_response({**stored, "error": {"code": "context_length_exceeded"}})  # no message
    with pytest.raises(ValidationError):
        validate_response({**stored, "status": "exploded"})


def _feed_text(translator: ResponseTranslator, encoding, text: str) -> None:
    translator.start()
    translator.feed(encoding.encode(text, allowed_special="all"))
    translator.finish("stop")


def test_feed_channel_inside_message_starts_next_message(encoding) -> None:
    # gpt-oss may drop "<|end|><|start|>assistant" between its analysis and its answer: the answer is a
    # message of its own, not markup inside the reasoning (the client would see no output_text at all).
    translator = _translator(encoding)
    _feed_text(translator, encoding, "<|channel|>analysis<|message|>Think.<|channel|>final<|message|>Answer.<|return|>")
    response = translator.response
    assert response.status == "completed"
    assert [(item.type, item.content[0].text) for item in response.output] == [
        ("reasoning", "Think."), ("message", "Answer.")
    ]
    assert [(m["channel"], m["content"][0]["text"]) for m in translator.output_messages] == [
        ("analysis", "Think."), ("final", "Answer.")
    ]
    assert response.usage.output_tokens_details.reasoning_tokens == 5  # <|channel|>analysis<|message|>Think.


@pytest.mark.parametrize("markup", ["<|message|>", "<|constrain|>", "<|reserved_200000|>"])
def test_feed_markup_inside_message_fails_response(encoding, markup: str) -> None:
    translator = _translator(encoding)
    _feed_text(translator, encoding, f"<|channel|>final<|message|>a{markup}b<|return|>")
    response = translator.response
    assert response.status == "failed" and "not valid harmony" in response.error.message
    assert markup not in response.output[0].content[0].text


def test_feed_end_of_text_inside_message_is_not_text(encoding) -> None:
    # vLLM stops on the generation config's <|endoftext|> too, and hands it over as the last token.
    translator = _translator(encoding)
    _feed_text(translator, encoding, "<|channel|>final<|message|>Hi.<|endoftext|>")
    assert translator.response.status == "completed"
    assert translator.response.output[0].content[0].text == "Hi."


@pytest.mark.parametrize("header", ["<|channel|>final<|channel|>analysis", "<|start|>assistant<|channel|>final",
                                    "<|channel|>commentary to=calc.<|channel|>add"])
def test_feed_markup_inside_header_fails_response(encoding, header: str) -> None:
    # harmony's parser keeps a stray special token of a header as the recipient's text: a tool name
    # "<|channel|>analysis" would be called, or the answer hidden as a call to no tool.
    translator = _translator(encoding)
    _feed_text(translator, encoding, f"{header}<|message|>x<|end|>")
    response = translator.response
    assert response.status == "failed" and "not valid harmony" in response.error.message
    assert response.output == [] and translator.pending_tool_call is None



MCP_CALL_THEN_ANSWER = (
    "<|channel|>commentary to=calc.add <|constrain|>json<|message|>{}<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hi<|return|>"
)


def _item_order(events) -> list[tuple[str, int]]:
    kinds = {"response.output_item.added": "added", "response.output_item.done": "done"}
    return [(kinds[e.type], e.output_index) for e in events if e.type in kinds]


def test_feed_mcp_call_ended_by_end_is_done_before_next_item(encoding) -> None:
    # <|end|> is no stop token: the model went on without the result, so the call is not run (as gpt-oss's and
    # vLLM's servers do), and its item ends before the next one is added, as OpenAI streams items.
    translator = ResponseTranslator(make_response(), encoding=encoding, first_sequence_number=1,
                                    mcp_labels={"calc": "calc"}, max_tool_calls=1)
    translator.start()
    events = translator.feed(encoding.encode(MCP_CALL_THEN_ANSWER, allowed_special="all"))
    events += translator.finish("stop")
    assert _item_order(events) == [("added", 0), ("done", 0), ("added", 1), ("done", 1)]
    assert translator.pending_tool_call is None and translator.response.status == "completed"
    call = translator.response.output[0]
    assert call.status == "failed" and "not run" in call.error.content[0]["text"]
    assert [(m["role"], m.get("recipient")) for m in translator.output_messages] == [
        ("assistant", "calc.add"), ("tool", "assistant"), ("assistant", None)
    ]
    assert not translator.tool_limit_reached  # a call not run does not count toward max_tool_calls
    assert "mcp_call.failed" in " ".join(e.type for e in events)


@pytest.mark.parametrize("text", ["", "<|return|>", "<|endoftext|>", "<|call|>", "<|return|><|endoftext|>"])
def test_finish_empty_generation_completes_with_no_output(encoding, text: str) -> None:
    # The model ended at once: OpenAI answers such a turn completed, its output empty; its tokens still count.
    translator = _translator(encoding)
    tokens = encoding.encode(text, allowed_special="all")
    _feed_text(translator, encoding, text)
    response = translator.response
    assert (response.status, response.output, response.error) == ("completed", [], None)
    assert response.usage.output_tokens == len(tokens)
    assert translator.output_messages == []


def test_finish_stop_token_after_reasoning_completes_with_reasoning_only(encoding) -> None:
    translator = _translator(encoding)
    _feed_text(translator, encoding, "<|channel|>analysis<|message|>Think.<|end|><|return|>")
    response = translator.response
    assert response.status == "completed" and [item.type for item in response.output] == ["reasoning"]


@pytest.mark.parametrize("chunk", [1, 3, 100])
def test_feed_invalid_token_counts_every_generated_token(encoding, chunk: int) -> None:
    # Usage does not depend on how the engine chunked its output: tokens after the invalid one count too.
    translator = _translator(encoding)
    translator.start()
    tokens = encoding.encode("<|channel|>final<|message|>Hi.<|end|>stray text after", allowed_special="all")
    for start in range(0, len(tokens), chunk):
        translator.feed(tokens[start:start + chunk])
    translator.fail("The engine aborted the generation.")
    response = translator.response
    assert response.status == "failed" and "not valid harmony" in response.error.message
    assert response.usage.output_tokens == len(tokens)
    assert [item.content[0].text for item in response.output] == ["Hi."]
