"""A python call of a hosted code interpreter tool streams as a ``code_interpreter_call``, as OpenAI streams it."""

from __future__ import annotations

from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter
from support.harmony_transcripts import make_response

from oss_responses.harmony.hosted_items import HostedCalls
from oss_responses.harmony.translator import ResponseTranslator

EVENT = TypeAdapter(ResponseStreamEvent)
CODE = "123*456"


def _translator(encoding, hosted: frozenset[str] = frozenset({"python"}), **shown) -> ResponseTranslator:
    translator = ResponseTranslator(make_response(), encoding=encoding, first_sequence_number=1,
                                    mcp_labels={"python": "code_interpreter"}, hosted_builtins=hosted,
                                    hosted_calls=HostedCalls(**shown), id_seed="resp_1")
    translator.start()
    return translator


def _call(encoding, code: str = CODE) -> list[int]:
    return encoding.encode(f"<|channel|>analysis to=python code<|message|>{code}<|call|>", allowed_special="all")


def _kinds(events: list) -> list[str]:
    return [event.type for event in events]


def test_code_streams_as_model_writes_it_then_interpreting(encoding) -> None:
    translator = _translator(encoding)
    events = translator.feed(_call(encoding))
    deltas = [event.delta for event in events if event.type == "response.code_interpreter_call_code.delta"]
    assert _kinds(events) == ["response.output_item.added", "response.code_interpreter_call.in_progress",
                              *["response.code_interpreter_call_code.delta"] * len(deltas),
                              "response.code_interpreter_call_code.done", "response.code_interpreter_call.interpreting"]
    assert "".join(deltas) == CODE and events[-2].code == CODE
    added = events[0].item
    assert (added.type, added.status, added.code, added.outputs) == ("code_interpreter_call", "in_progress", "", None)
    assert added.container_id.startswith("cntr_") and added.id.startswith("ci_")
    assert all(EVENT.validate_python(event.model_dump()) for event in events)


def test_result_completes_item_and_reaches_model(encoding) -> None:
    translator = _translator(encoding)
    translator.feed(_call(encoding))
    call = translator.pending_tool_call
    assert (call.kind, call.server_label, call.name, call.arguments) == ("mcp", "code_interpreter", "python", CODE)
    events = translator.feed_tool_result("56088\n")
    assert _kinds(events) == ["response.code_interpreter_call.completed", "response.output_item.done"]
    done = events[-1].item
    assert (done.status, done.code, done.outputs) == ("completed", CODE, None)  # outputs not asked for
    assert translator.output_messages[-1]["content"][0]["text"] == "56088\n"


def test_outputs_asked_for_hold_result_as_logs(encoding) -> None:
    translator = _translator(encoding, code_outputs=True)
    translator.feed(_call(encoding))
    done = translator.feed_tool_result("56088\n")[-1].item
    assert [output.model_dump() for output in done.outputs] == [{"type": "logs", "logs": "56088\n"}]


def test_failed_run_ends_item_failed_with_error_as_logs(encoding) -> None:
    translator = _translator(encoding, code_outputs=True)
    translator.feed(_call(encoding))
    events = translator.feed_tool_result(None, "the tool server is unreachable")
    assert _kinds(events) == ["response.output_item.done"]
    assert (events[0].item.status, events[0].item.outputs[0].logs) == ("failed", "the tool server is unreachable")


def test_cancel_while_interpreting_ends_item_incomplete(encoding) -> None:
    translator = _translator(encoding)
    translator.feed(_call(encoding))
    translator.finish("abort")
    [item] = translator.response.output
    assert (item.type, item.status, item.code, translator.response.status) == (
        "code_interpreter_call", "incomplete", CODE, "cancelled")


def test_code_cut_by_length_ends_item_incomplete_with_code_so_far(encoding) -> None:
    translator = _translator(encoding)
    events = translator.feed(_call(encoding)[:-1])
    events += translator.finish("length")
    done = [event.item for event in events if event.type == "response.output_item.done"]
    assert [(item.type, item.status, item.code) for item in done] == [("code_interpreter_call", "incomplete", CODE)]
    assert "response.code_interpreter_call_code.done" in _kinds(events)


def test_calls_of_one_response_share_its_container(encoding) -> None:
    translator = _translator(encoding)
    first = translator.feed(_call(encoding))[0].item
    translator.feed_tool_result("56088")
    second = translator.feed(_call(encoding, "1+1"))[0].item
    assert (second.code, second.id != first.id, second.container_id) == ("", True, first.container_id)


def test_container_the_tool_names_is_the_items(encoding) -> None:
    translator = _translator(encoding, container_id="cntr_mine")
    assert translator.feed(_call(encoding))[0].item.container_id == "cntr_mine"


def test_python_of_mcp_label_stays_mcp_call(encoding) -> None:
    translator = _translator(encoding, hosted=frozenset())
    events = translator.feed(_call(encoding))
    assert events[0].item.type == "mcp_call" and "response.mcp_call.in_progress" in _kinds(events)
