"""Stateless multi-turn as Codex CLI does it: ``store: false`` with
``include: ["reasoning.encrypted_content"]``, every turn replaying the whole conversation; and the
endpoints such clients use beside it: ``/v1/responses/compact`` and ``/v1/responses/input_tokens``.

The whole service (an API process, a Celery worker process with the scripted engine, SQLite) and the
official SDK. The store=false rows' removal is storage-independent and already runs on PostgreSQL in
test_end_to_end.py, so this module runs on SQLite only.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.responses import Response
from support import MODEL
from support.processes import start_api_process, start_worker_process, stop_process

from oss_responses.config import Settings
from oss_responses.sealing import new_key
from oss_responses.storage import Database, get_response

INCLUDE = ["reasoning.encrypted_content"]
WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "Weather of a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
ASK = {"type": "message", "role": "user", "content": 'call functions.get_weather {"city": "Paris"}'}
TOOL_ANSWER = '{"temperature": 21, "sky": "clear"}'
CONTEXT = 2000  # the scripted model's, as vLLM's max_model_len
TOO_LONG = "word " * 2500


@dataclass
class Stack:
    db: Database
    client: OpenAI


@pytest.fixture(scope="module")
def stack(sqlite_template: Path, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("stateless")
    shutil.copyfile(sqlite_template, folder / "oss-responses.db")
    settings = Settings(database_url=f"sqlite:///{folder / 'oss-responses.db'}", redis_url=redis_url, models=[MODEL],
                        encryption_keys=[new_key()], scripted_context_tokens=CONTEXT)
    processes = []
    try:
        processes.append(start_worker_process(settings, folder / "worker.log"))
        api, url = start_api_process(settings, folder / "api.log")
        processes.append(api)
        db = Database(settings.database_url)
        with OpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0, timeout=30) as client:
            yield Stack(db=db, client=client)
        db.dispose()
    finally:
        for process in reversed(processes):
            stop_process(process)


def _turn(stack: Stack, input_items: list[dict[str, Any]]) -> Response:
    return stack.client.responses.create(
        model=MODEL, input=input_items, tools=[WEATHER_TOOL], store=False, include=INCLUDE  # type: ignore[arg-type, list-item]
    )


def _replay(response: Response) -> list[dict[str, Any]]:
    return [item.model_dump(mode="json", exclude_none=True) for item in response.output]


def _tamper(blob: str) -> str:
    """The blob with its last 8 characters (part of the authentication tag) changed."""
    return blob[:-8] + ("A" * 8 if not blob.endswith("A" * 8) else "B" * 8)


def _tool_output(response: Response) -> dict[str, Any]:
    call = response.output[-1]
    assert call.type == "function_call"
    return {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_ANSWER}


@pytest.fixture(scope="module")
def first(stack: Stack) -> Response:
    return _turn(stack, [ASK])


def test_stateless_first_turn_reasoning_has_encrypted_content(first: Response) -> None:
    assert [item.type for item in first.output] == ["reasoning", "function_call"]
    assert first.output[0].encrypted_content


def test_stateless_second_turn_replaying_first_completes_with_tool_output(stack: Stack, first: Response) -> None:
    second = _turn(stack, [ASK, *_replay(first), _tool_output(first)])
    assert second.status == "completed" and TOOL_ANSWER in second.output_text
    assert second.output[0].type == "reasoning" and second.output[0].encrypted_content


def test_stateless_turns_store_nothing(stack: Stack, first: Response) -> None:
    second = _turn(stack, [ASK, *_replay(first), _tool_output(first)])
    assert stack.db.run(get_response, first.id) is None and stack.db.run(get_response, second.id) is None
    with pytest.raises(openai.NotFoundError):
        stack.client.responses.retrieve(second.id)


def test_stateless_second_turn_with_tampered_reasoning_is_bad_request(stack: Stack, first: Response) -> None:
    replayed = _replay(first)
    replayed[0]["encrypted_content"] = _tamper(replayed[0]["encrypted_content"])
    with pytest.raises(openai.BadRequestError) as raised:
        _turn(stack, [ASK, *replayed, _tool_output(first)])
    assert raised.value.param == "input[1].encrypted_content"  # type: ignore[attr-defined]


def test_stream_turn_over_context_fails_with_openai_code(stack: Stack) -> None:
    # OpenAI's code, not among openai's ResponseError literals: the SDK parses it all the same, and
    # Codex CLI takes it for a full context (compacts, does not retry) where it would retry any other.
    events = list(stack.client.responses.create(model=MODEL, input=TOO_LONG, store=False, stream=True))
    assert [event.type for event in events] == ["response.created", "response.in_progress", "response.failed"]
    error = events[-1].response.error  # type: ignore[union-attr]
    assert error is not None and error.code == "context_length_exceeded"  # type: ignore[comparison-overlap]
    assert error.message.startswith("Your input exceeds the context window of this model")


def test_retrieve_response_over_context_has_openai_code(stack: Stack) -> None:
    created = stack.client.responses.create(model=MODEL, input=TOO_LONG, background=True)
    while (response := stack.client.responses.retrieve(created.id)).status in ("queued", "in_progress"):
        time.sleep(0.05)
    assert response.status == "failed" and response.error is not None
    assert response.error.code == "context_length_exceeded"  # type: ignore[comparison-overlap]


# --- POST /v1/responses/compact ------------------------------------------------------------------

CONVERSATION = [
    {"type": "message", "role": "user", "content": "first apple"},
    {"type": "message", "role": "assistant", "content": "Noted the apple."},
    {"type": "message", "role": "user", "content": "second banana"},
]


def _user_texts(output: list[Any]) -> list[str]:
    return [item.content[0].text for item in output if item.type == "message" and item.role == "user"]


@pytest.fixture(scope="module")
def compacted(stack: Stack) -> Any:
    return stack.client.responses.compact(model=MODEL, input=CONVERSATION)  # type: ignore[arg-type]


def test_compact_returns_user_messages_then_one_compaction_item(compacted: Any) -> None:
    assert compacted.object == "response.compaction"
    assert [item.type for item in compacted.output] == ["message", "message", "compaction"]
    assert _user_texts(compacted.output) == ["first apple", "second banana"]
    assert compacted.output[-1].encrypted_content and compacted.usage.output_tokens > 0


def test_create_response_with_compaction_item_shows_summary_to_model(stack: Stack, compacted: Any) -> None:
    # As received: the SDK types user messages of the output as assistant messages (openai's union has no user one).
    replayed = [item.to_dict(mode="json", warnings=False) for item in compacted.output]
    later = _turn(stack, [*replayed, {"type": "message", "role": "user", "content": "third cherry"}])
    # The scripted engine lists the earlier user messages: the summary is one, and it lists the first two.
    assert later.status == "completed" and "Summary of the earlier conversation" in later.output_text
    assert "first apple" in later.output_text.split("Summary of the earlier conversation")[1]


def test_compact_previous_response_id_includes_stored_user_messages(stack: Stack) -> None:
    stored = stack.client.responses.create(model=MODEL, input="first apple")
    compacted = stack.client.responses.compact(
        model=MODEL, previous_response_id=stored.id,
        input=[{"type": "message", "role": "user", "content": "second banana"}],
    )
    assert _user_texts(compacted.output) == ["first apple", "second banana"]
    assert compacted.output[-1].type == "compaction"


def test_compact_previous_response_id_in_conversation_includes_its_user_messages(stack: Stack) -> None:
    conversation = stack.client.conversations.create(items=[{"role": "user", "content": "zero cherry"}])
    stored = stack.client.responses.create(model=MODEL, input="first apple", conversation=conversation.id)
    compacted = stack.client.responses.compact(
        model=MODEL, previous_response_id=stored.id,
        input=[{"type": "message", "role": "user", "content": "second banana"}],
    )
    assert _user_texts(compacted.output) == ["zero cherry", "first apple", "second banana"]


def test_compact_conversation_over_context_is_bad_request(stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        stack.client.responses.compact(model=MODEL, input=TOO_LONG)
    assert raised.value.code == "context_length_exceeded" and raised.value.param == "input"  # type: ignore[attr-defined]


def test_create_response_with_tampered_compaction_is_bad_request(stack: Stack, compacted: Any) -> None:
    item = compacted.output[-1].model_dump(mode="json", exclude_none=True)
    item["encrypted_content"] = _tamper(item["encrypted_content"])
    with pytest.raises(openai.BadRequestError) as raised:
        _turn(stack, [item, {"type": "message", "role": "user", "content": "go on"}])
    assert raised.value.param == "input[0].encrypted_content"  # type: ignore[attr-defined]


# --- POST /v1/responses/input_tokens ---------------------------------------------------------------

def test_count_input_tokens_equals_worker_prompt(stack: Stack) -> None:
    counted = stack.client.responses.input_tokens.count(model=MODEL, input="count me", tools=[WEATHER_TOOL])  # type: ignore[list-item]
    response = stack.client.responses.create(model=MODEL, input="count me", tools=[WEATHER_TOOL])  # type: ignore[list-item]
    assert counted.object == "response.input_tokens"
    assert response.usage is not None and counted.input_tokens == response.usage.input_tokens


def test_count_input_tokens_with_previous_response_counts_stored_turns(stack: Stack) -> None:
    first = stack.client.responses.create(model=MODEL, input="first apple")
    counted = stack.client.responses.input_tokens.count(model=MODEL, input="second banana",
                                                        previous_response_id=first.id)
    second = stack.client.responses.create(model=MODEL, input="second banana", previous_response_id=first.id)
    assert second.usage is not None and counted.input_tokens == second.usage.input_tokens


def test_count_input_tokens_tampered_reasoning_is_bad_request(stack: Stack, first: Response) -> None:
    replayed = _replay(first)
    replayed[0]["encrypted_content"] = _tamper(replayed[0]["encrypted_content"])
    with pytest.raises(openai.BadRequestError) as raised:
        stack.client.responses.input_tokens.count(model=MODEL, input=[ASK, *replayed])  # type: ignore[list-item]
    assert raised.value.param == "input[1].encrypted_content"  # type: ignore[attr-defined]


# --- a call to a tool the model was not offered: no item shows it, a replay renders it all the same ----

TIME_TOOL = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
ONLY_TIME = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_time"}]}
UNOFFERED_CALLS = {  # the first turn's request: its input, then the rest of its body
    "tool_choice_none": (ASK["content"], {"tools": [WEATHER_TOOL], "tool_choice": "none"}),
    "allowed_tools": (ASK["content"], {"tools": [WEATHER_TOOL, TIME_TOOL], "tool_choice": ONLY_TIME}),
    "made_up_function": ('call functions.get_forecast {"city": "Paris"}', {"tools": [WEATHER_TOOL]}),
    "made_up_namespace": ('call weather.forecast {"city": "Paris"}', {"tools": [WEATHER_TOOL]}),
    # A built-in call (analysis channel) in a tool chain a function call keeps open.
    "builtin_before_function_call": ('call python 1+1 call functions.get_weather {"city": "Paris"}',
                                     {"tools": [WEATHER_TOOL]}),
    # Cut by max_output_tokens inside the call: an incomplete turn.
    "cut_inside_call": ('call functions.get_forecast {"city": "' + "Paris " * 40 + '"}',
                        {"tools": [WEATHER_TOOL], "max_output_tokens": 80}),
}


def _next_item(first: Response) -> dict[str, Any]:
    if first.output[-1].type == "function_call":
        return _tool_output(first)
    return {"type": "message", "role": "user", "content": "go on"}


@pytest.mark.parametrize("case", sorted(UNOFFERED_CALLS))
def test_stateless_replay_of_unoffered_call_renders_chained_prompt(stack: Stack, case: str) -> None:
    text, body = UNOFFERED_CALLS[case]
    ask = {"type": "message", "role": "user", "content": text}
    stored = stack.client.responses.create(model=MODEL, input=[ask], **body)  # type: ignore[call-overload]
    chained = stack.client.responses.create(model=MODEL, input=[_next_item(stored)], previous_response_id=stored.id,
                                            **body)  # type: ignore[call-overload]
    first = stack.client.responses.create(model=MODEL, input=[ask], store=False, include=INCLUDE, **body)  # type: ignore[call-overload]
    assert first.status == stored.status
    replayed = stack.client.responses.create(model=MODEL, input=[ask, *_replay(first), _next_item(first)],
                                             store=False, include=INCLUDE, **body)  # type: ignore[call-overload]
    assert chained.usage is not None and replayed.usage is not None
    assert replayed.usage.input_tokens == chained.usage.input_tokens


@pytest.mark.parametrize("case", sorted(UNOFFERED_CALLS))
def test_stateless_replay_of_unoffered_call_retrieved_with_include_renders_chained_prompt(
    stack: Stack, case: str
) -> None:
    """A stored response made without ``include``, retrieved with ``reasoning.encrypted_content`` (the SDK's
    ``responses.retrieve(id, include=[...])``), replays as the chained turn renders, its call to a tool not
    offered included, as the same turn created with ``include`` does."""
    text, body = UNOFFERED_CALLS[case]
    ask = {"type": "message", "role": "user", "content": text}
    stored = stack.client.responses.create(model=MODEL, input=[ask], **body)  # type: ignore[call-overload]
    chained = stack.client.responses.create(model=MODEL, input=[_next_item(stored)], previous_response_id=stored.id,
                                            **body)  # type: ignore[call-overload]
    retrieved = stack.client.responses.retrieve(stored.id, include=INCLUDE)  # type: ignore[arg-type]
    replayed = stack.client.responses.create(model=MODEL, input=[ask, *_replay(retrieved), _next_item(retrieved)],
                                             store=False, include=INCLUDE, **body)  # type: ignore[call-overload]
    assert chained.usage is not None and replayed.usage is not None
    assert replayed.usage.input_tokens == chained.usage.input_tokens


def test_stateless_replay_of_chained_turns_retrieved_with_include_renders_chained_prompt(stack: Stack) -> None:
    """Three chained turns stored without ``include`` (calls to tools not offered, the last one's function call
    pending), each retrieved with ``reasoning.encrypted_content``, replay as the fourth chained turn renders."""
    asks = ['call functions.get_forecast {"city": "Paris"}', 'call weather.forecast {"city": "Rome"}',
            'call python 1+1 call functions.get_weather {"city": "Oslo"}']
    replay: list[dict[str, Any]] = []
    previous: str | None = None
    for text in asks:
        ask = {"type": "message", "role": "user", "content": text}
        stored = stack.client.responses.create(model=MODEL, input=[ask], tools=[WEATHER_TOOL],  # type: ignore[list-item]
                                               previous_response_id=previous)  # type: ignore[arg-type]
        previous = stored.id
        replay += [ask, *_replay(stack.client.responses.retrieve(stored.id, include=INCLUDE))]  # type: ignore[arg-type]
    assert stored.output[-1].type == "function_call"
    chained = stack.client.responses.create(model=MODEL, input=[_tool_output(stored)], tools=[WEATHER_TOOL],  # type: ignore[list-item]
                                            previous_response_id=previous)
    replayed = stack.client.responses.create(model=MODEL, input=[*replay, _tool_output(stored)],  # type: ignore[list-item]
                                             tools=[WEATHER_TOOL], store=False, include=INCLUDE)  # type: ignore[list-item]
    assert chained.usage is not None and replayed.usage is not None
    assert replayed.usage.input_tokens == chained.usage.input_tokens
