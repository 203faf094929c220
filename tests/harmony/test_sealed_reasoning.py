"""Stateless turns: reasoning items carry their sealed analysis message, and replaying them renders
exactly the prompt that the stored conversation (previous_response_id) renders."""

from __future__ import annotations

import pytest
from openai.types.responses import (
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
)
from support.harmony_transcripts import golden_tokens, make_response

from oss_responses.errors import BadRequest
from oss_responses.harmony.messages import text_message
from oss_responses.harmony.render import ConversationTurn, RenderOptions, render_prompt
from oss_responses.harmony.translator import UNAVAILABLE, ResponseTranslator
from oss_responses.requests import parse_create_request
from oss_responses.sealing import Sealer, new_key

SEALER = Sealer([new_key()])
REASONING_SEAL = SEALER.sealing("reasoning")
OPTIONS = RenderOptions(conversation_start_date="2026-11-23", unseal=SEALER.open)
WEATHER_TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
QUESTION = {"type": "message", "role": "user", "content": "What is the weather in Paris?"}


def _request(input_items, **body):
    return parse_create_request({"model": "gpt-oss-20b", "tools": [WEATHER_TOOL], "input": input_items, **body})


def _first_turn(encoding, seal=REASONING_SEAL):
    """Turn 1: the model reasons, then calls get_weather (the function_call golden transcript)."""
    translator = ResponseTranslator(make_response(), encoding=encoding, first_sequence_number=1, seal=seal)
    events = translator.start() + translator.feed(golden_tokens(encoding, "function_call"))
    events += translator.finish("stop")
    return translator, events


def _stored_history(encoding, translator):
    rendered = render_prompt(_request([QUESTION]), [], OPTIONS, encoding)
    return [ConversationTurn(rendered.new_messages + translator.output_messages, dict(translator.function_calls))]


def _replayed_output(translator):
    return [item.model_dump(mode="json", exclude_none=True) for item in translator.response.output]


def _call_output(translator):
    call = translator.response.output[1]
    return {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature": 21}'}


def test_translate_reasoning_done_item_carries_encrypted_content(encoding) -> None:
    translator, events = _first_turn(encoding)
    done = next(e for e in events if isinstance(e, ResponseOutputItemDoneEvent) and e.item.type == "reasoning")
    assert SEALER.open("reasoning", done.item.encrypted_content) == [translator.output_messages[0]]
    assert translator.response.output[0].encrypted_content == done.item.encrypted_content


def test_translate_reasoning_added_item_has_no_encrypted_content(encoding) -> None:
    _, events = _first_turn(encoding)
    added = next(e for e in events if isinstance(e, ResponseOutputItemAddedEvent) and e.item.type == "reasoning")
    assert added.item.encrypted_content is None


def test_translate_without_seal_gives_no_encrypted_content(encoding) -> None:
    translator, _ = _first_turn(encoding, seal=None)
    assert translator.response.output[0].encrypted_content is None


def test_render_replayed_sealed_turn_matches_stored_turn(encoding) -> None:
    translator, _ = _first_turn(encoding)
    stored = render_prompt(_request([_call_output(translator)]), _stored_history(encoding, translator), OPTIONS,
                           encoding)
    stateless = _request([QUESTION, *_replayed_output(translator), _call_output(translator)], store=False)
    assert render_prompt(stateless, [], OPTIONS, encoding).token_ids == stored.token_ids


def test_render_sealed_reasoning_preferred_over_content(encoding) -> None:
    translator, _ = _first_turn(encoding)
    reasoning = _replayed_output(translator)[0] | {
        "content": [{"type": "reasoning_text", "text": "edited by the client"}], "summary": [],
    }
    rendered = render_prompt(_request([QUESTION, reasoning]), [], OPTIONS, encoding)
    text = encoding.decode(rendered.token_ids)
    assert "call get_weather for Paris" in text and "edited by the client" not in text


def test_render_tampered_encrypted_content_is_bad_request(encoding) -> None:
    translator, _ = _first_turn(encoding)
    reasoning = _replayed_output(translator)[0]
    reasoning["encrypted_content"] = reasoning["encrypted_content"][:-8] + "AAAAAAAA"
    with pytest.raises(BadRequest) as raised:
        render_prompt(_request([QUESTION, reasoning]), [], OPTIONS, encoding)
    assert raised.value.param == "input[1].encrypted_content"


def test_render_encrypted_content_without_keys_is_bad_request(encoding) -> None:
    translator, _ = _first_turn(encoding)
    no_keys = RenderOptions(conversation_start_date="2026-11-23")
    with pytest.raises(BadRequest) as raised:
        render_prompt(_request([QUESTION, _replayed_output(translator)[0]]), [], no_keys, encoding)
    assert raised.value.param == "input[1].encrypted_content"
    assert "OSS_RESPONSES_ENCRYPTION_KEYS" in raised.value.message


def _compaction(blob: str) -> dict:
    return {"type": "compaction", "id": "cmp_1", "encrypted_content": blob}


def test_render_compaction_item_renders_sealed_summary_where_it_stands(encoding) -> None:
    summary = text_message("user", "Summary of the earlier conversation: the user wants Paris weather.")
    request = _request([_compaction(SEALER.seal("compaction", [summary])), {"role": "user", "content": "go on"}])
    text = encoding.decode(render_prompt(request, [], OPTIONS, encoding).token_ids)
    assert text.endswith(
        "<|start|>user<|message|>Summary of the earlier conversation: the user wants Paris weather.<|end|>"
        "<|start|>user<|message|>go on<|end|><|start|>assistant"
    )


def test_render_reasoning_blob_as_compaction_is_bad_request(encoding) -> None:
    translator, _ = _first_turn(encoding)
    blob = _replayed_output(translator)[0]["encrypted_content"]
    with pytest.raises(BadRequest) as raised:
        render_prompt(_request([_compaction(blob)]), [], OPTIONS, encoding)
    assert raised.value.param == "input[0].encrypted_content"


# --- messages no item shows (a call to a tool nobody offered, and its error) ------------------------

REASONING = "<|channel|>analysis<|message|>Need the time.<|end|><|start|>assistant"
UNOFFERED = '<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"zone": "CET"}'
BUILTIN_UNOFFERED = "<|channel|>analysis to=python code<|message|>import time; time.time()<|call|>"
WEATHER_CALL = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
SORRY = "<|channel|>final<|message|>Sorry.<|return|>"
# The engine calls of one response: after each but the last the model waits on its unoffered call, answered
# with the worker's error; then how the response ends.
HIDDEN = {
    "then_reasoning": ([REASONING + UNOFFERED + "<|call|>", "<|channel|>analysis<|message|>No such tool.<|end|>"
                        "<|start|>assistant" + SORRY], "stop"),
    "then_final": ([REASONING + UNOFFERED + "<|call|>", SORRY], "stop"),
    "twice": ([REASONING + UNOFFERED + "<|call|>", UNOFFERED + "<|call|>", SORRY], "stop"),
    "passed_over": ([REASONING + UNOFFERED + "<|end|><|start|>assistant" + SORRY], "stop"),
    "cut_short": ([REASONING + UNOFFERED], "length"),
    "builtin_then_function_call": ([REASONING + BUILTIN_UNOFFERED, WEATHER_CALL], "stop"),
}


def _hidden_turn(encoding, name: str, seal=REASONING_SEAL) -> ResponseTranslator:
    engine_calls, finish = HIDDEN[name]
    translator = ResponseTranslator(make_response(), encoding=encoding, first_sequence_number=1, seal=seal,
                                    offered_functions=frozenset({"functions.get_weather"}))
    translator.start()
    for index, text in enumerate(engine_calls):
        if index:
            call = translator.pending_tool_call
            assert call is not None and call.kind == "unavailable"
            translator.feed_tool_result(None, UNAVAILABLE.format(recipient=call.recipient))
        translator.feed(encoding.encode(text, allowed_special="all"))
    translator.finish(finish)
    return translator


def _next_input(translator) -> dict:
    last = translator.response.output[-1]
    if last.type == "function_call":
        return {"type": "function_call_output", "call_id": last.call_id, "output": '{"temperature": 21}'}
    return {"type": "message", "role": "user", "content": "go on"}


@pytest.mark.parametrize("name", sorted(HIDDEN))
def test_render_replayed_turn_with_unoffered_call_matches_stored_turn(encoding, name: str) -> None:
    translator = _hidden_turn(encoding, name)
    chained = render_prompt(_request([_next_input(translator)]), _stored_history(encoding, translator), OPTIONS,
                            encoding)
    stateless = _request([QUESTION, *_replayed_output(translator), _next_input(translator)], store=False)
    assert encoding.decode(render_prompt(stateless, [], OPTIONS, encoding).token_ids) == encoding.decode(
        chained.token_ids)


def test_translate_unoffered_call_is_sealed_into_next_reasoning_item(encoding) -> None:
    translator = _hidden_turn(encoding, "then_reasoning")
    output = translator.response.output
    assert [item.type for item in output] == ["reasoning", "reasoning", "message"]  # no item of its own
    assert SEALER.open("reasoning", output[1].encrypted_content) == translator.output_messages[1:4]


def test_translate_unoffered_call_before_answer_gets_sealed_reasoning_item(encoding) -> None:
    translator = _hidden_turn(encoding, "then_final")
    carrier = translator.response.output[1]
    assert [item.type for item in translator.response.output] == ["reasoning", "reasoning", "message"]
    assert (carrier.content, carrier.summary, carrier.status) == ([], [], "completed")
    assert SEALER.open("reasoning", carrier.encrypted_content) == translator.output_messages[1:3]


def test_translate_unoffered_call_without_seal_has_no_item(encoding) -> None:
    translator = ResponseTranslator(make_response(), encoding=encoding, first_sequence_number=1,
                                    offered_functions=frozenset())
    translator.start()
    translator.feed(encoding.encode(REASONING + UNOFFERED + "<|end|><|start|>assistant" + SORRY,
                                    allowed_special="all"))
    translator.finish("stop")
    assert [item.type for item in translator.response.output] == ["reasoning", "message"]


@pytest.mark.parametrize("name", sorted(HIDDEN))
def test_translate_sealing_plan_without_seal_names_what_sealed_turn_carries(encoding, name: str) -> None:
    # Kept with a turn stored without include: a retrieve with include seals by it (api/sealed.py).
    sealed, unsealed = _hidden_turn(encoding, name), _hidden_turn(encoding, name, seal=None)
    carried = [SEALER.open("reasoning", item.encrypted_content) for item in sealed.response.output
               if item.type == "reasoning"]
    plan = unsealed.sealing_plan
    assert [[unsealed.output_messages[index] for index in span["messages"]] for span in plan] == carried
    # A span without an item stands where the sealed turn's own reasoning item does.
    types = [(item.id, item.type) for item in unsealed.response.output]
    for span in (span for span in plan if "before" in span):
        types.insert(next((i for i, (item_id, _) in enumerate(types) if item_id == span["before"]), len(types)),
                     ("", "reasoning"))
    assert [kind for _, kind in types] == [item.type for item in sealed.response.output]
    assert [span["messages"] for span in sealed.sealing_plan] == [span["messages"] for span in plan]
