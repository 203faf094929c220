"""The whole service, as a user sees it: two API processes, a Celery worker process with the scripted
engine, the official SDK as the client, on SQLite and on PostgreSQL.

The processes live for the module (one set per database), so each test uses its own responses.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import openai
import pytest
import redis as redis_lib
from openai import OpenAI, Stream
from openai.types.responses import ResponseStreamEvent
from sqlalchemy import select
from support import MODEL
from support.processes import start_api_process, start_worker_process, stop_process
from support.sdk import wait_ended

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.eventlog import parse_frame
from oss_responses.statuses import ACTIVE_STATUSES
from oss_responses.storage import Database, ResponseRow, get_response

TOKENS_PER_SECOND = 400.0  # fast enough for short answers, slow enough to act mid-generation
LONG = "tokens 4000"  # about ten seconds of answer at that speed
POLL_S = 0.02
DEADLINE_S = 20.0


@dataclass
class Stack:
    settings: Settings
    db: Database
    client: OpenAI  # API process 1
    other: OpenAI  # API process 2


@pytest.fixture(scope="module")
def stack(stack_database_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = Settings(database_url=stack_database_url, redis_url=redis_url, models=[MODEL],
                        scripted_tokens_per_second=TOKENS_PER_SECOND)
    logs = tmp_path_factory.mktemp("e2e-logs")
    processes = []
    try:
        processes.append(start_worker_process(settings, logs / "worker.log"))
        api1, url1 = start_api_process(settings, logs / "api1.log")
        processes.append(api1)
        api2, url2 = start_api_process(settings, logs / "api2.log")
        processes.append(api2)
        db = Database(settings.database_url)
        with _sdk(url1) as client, _sdk(url2) as other:
            yield Stack(settings=settings, db=db, client=client, other=other)
        db.dispose()
    finally:
        for process in reversed(processes):
            stop_process(process)
        _show_logs(Path(logs))


def _sdk(base_url: str) -> OpenAI:
    return OpenAI(base_url=f"{base_url}/v1", api_key="test", max_retries=0, timeout=30)


def _show_logs(folder: Path) -> None:
    for path in sorted(folder.glob("*.log")):
        print(f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}")


def _read_until_text(stream: Stream[ResponseStreamEvent]) -> str:
    """Read a stream up to its first text delta; the response's id."""
    response_id = ""
    for event in stream:
        if event.type == "response.created":
            response_id = event.response.id
        if event.type == "response.output_text.delta":
            return response_id
    raise AssertionError("the stream ended before any text")


def _wait_for_status(stack: Stack, response_id: str, expected: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while (status := stack.db.run(get_response, response_id).status) in ACTIVE_STATUSES:
        assert time.monotonic() < deadline, f"{response_id} still {status}"
        time.sleep(POLL_S)
    assert status == expected


def _newest_response_id(stack: Stack) -> str | None:
    query = select(ResponseRow.id).order_by(ResponseRow.created_at.desc()).limit(1)
    with stack.db.session() as session:
        return session.execute(query).scalar_one_or_none()


def test_create_response_stream_emits_events_in_order(stack: Stack) -> None:
    events = list(stack.client.responses.create(model=MODEL, input="hello there", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert "hello there" in text and text == events[-1].response.output_text


def test_create_response_without_stream_returns_final_response(stack: Stack) -> None:
    response = stack.client.responses.create(model=MODEL, input="what is up")
    assert response.status == "completed" and "what is up" in response.output_text
    assert response.usage is not None and response.usage.output_tokens > 0
    assert stack.client.responses.retrieve(response.id).model_dump() == response.model_dump()


def test_finished_response_usage_details_are_counts_on_the_wire(stack: Stack) -> None:
    # A null detail (openai's unset cache_write_tokens_details) failed every streamed run of the JS Agents SDK.
    base_url = str(stack.client.base_url).removesuffix("/v1/")
    raw = _raw_stream(base_url, "POST", "/v1/responses", json={"model": MODEL, "input": "hi", "stream": True})
    completed = parse_frame(raw.rstrip(b"\n").rsplit(b"\n\n", 1)[1] + b"\n\n")
    assert completed["type"] == "response.completed"
    retrieved = stack.client.responses.with_raw_response.retrieve(completed["response"]["id"]).http_response.json()
    for usage in (completed["response"]["usage"], retrieved["usage"]):
        details = usage["input_tokens_details"] | usage["output_tokens_details"]
        assert details and all(isinstance(count, int) for count in details.values()), usage


WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
ASK_WEATHER = {"role": "user", "content": 'call functions.get_weather {"city": "Paris"}'}


def test_item_references_name_earlier_output_without_previous_response_id(stack: Stack) -> None:
    # The Vercel AI SDK (store on) replays the conversation itself, naming earlier output items by id.
    first = stack.client.responses.create(model=MODEL, input=[ASK_WEATHER], tools=[WEATHER])
    reasoning, call = first.output
    second = stack.other.responses.create(model=MODEL, tools=[WEATHER], input=[
        ASK_WEATHER, {"type": "item_reference", "id": reasoning.id}, {"type": "item_reference", "id": call.id},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},  # type: ignore[union-attr]
    ])
    assert second.output_text == "The tool functions.get_weather returned: sunny"
    stored = stack.client.responses.input_items.list(second.id, order="asc").data
    assert [item.id for item in stored[1:3]] == [reasoning.id, call.id]


def test_item_reference_without_type_names_earlier_output(stack: Stack) -> None:
    # openai's ItemReference has an optional type: {"id": ...} alone (or "type": null) is a reference.
    first = stack.client.responses.create(model=MODEL, input=[ASK_WEATHER], tools=[WEATHER])
    reasoning, call = first.output
    second = stack.other.responses.create(model=MODEL, tools=[WEATHER], input=[
        ASK_WEATHER, {"id": reasoning.id}, {"type": None, "id": call.id},  # type: ignore[list-item]
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},  # type: ignore[union-attr]
    ])
    assert second.output_text == "The tool functions.get_weather returned: sunny"


def test_continuing_response_with_its_output_items_again_is_bad_request(stack: Stack) -> None:
    # OpenAI's 400: previous_response_id already gives the model these items (a client that also resends
    # the call it answers); here they were rendered twice, the model reading its reasoning and call again.
    first = stack.client.responses.create(model=MODEL, input=[ASK_WEATHER], tools=[WEATHER])
    reasoning, call = first.output
    with pytest.raises(openai.BadRequestError) as refused:
        stack.other.responses.create(model=MODEL, tools=[WEATHER], previous_response_id=first.id, input=[
            reasoning.model_dump(exclude_none=True), call.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},  # type: ignore[union-attr]
        ])
    assert refused.value.body == {  # type: ignore[comparison-overlap]
        "message": f"Duplicate item found with id {reasoning.id}. Remove duplicate items from your input and "
                   "try again.",
        "type": "invalid_request_error", "param": "input", "code": None,
    }
    assert _newest_response_id(stack) == first.id


def test_create_response_with_large_input_is_tokenised_in_worker_child_process(stack: Stack) -> None:
    # Above render_process_above_chars (256 kB): the Celery worker's spawned tokenizer process renders it.
    text = "lorem ipsum dolor sit amet " * 20_000
    response = stack.client.responses.create(model=MODEL, input=text, max_output_tokens=16)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]
    assert response.usage is not None and response.usage.input_tokens > 100_000


def test_create_response_background_poll_until_completed(stack: Stack) -> None:
    created = stack.client.responses.create(model=MODEL, input="poll me", background=True)
    assert created.status == "queued"
    final = wait_ended(stack.other, created.id)
    assert final.status == "completed" and "poll me" in final.output_text


def test_retrieve_stream_resumes_on_second_process_with_missing_events_only(stack: Stack) -> None:
    stream = stack.client.responses.create(model=MODEL, input="tokens 200", background=True, stream=True)
    first = []
    for event in stream:
        first.append(event)
        if event.type == "response.output_text.delta":
            break
    stream.close()  # the client drops; a background response runs on
    response_id = first[0].response.id
    rest = list(stack.other.responses.retrieve(response_id, stream=True, starting_after=first[-1].sequence_number))
    full = list(stack.client.responses.retrieve(response_id, stream=True))
    assert [e.sequence_number for e in first + rest] == list(range(len(full)))
    assert [e.model_dump() for e in first + rest] == [e.model_dump() for e in full]
    assert full[-1].type == "response.completed"


def _raw_stream(base_url: str, method: str, path: str, **kwargs: object) -> bytes:
    with httpx2.Client(base_url=base_url, timeout=30) as http, http.stream(method, path, **kwargs) as reply:  # type: ignore[arg-type]
        assert reply.status_code == 200
        return b"".join(reply.iter_bytes())


def _wait_for_tombstone(stack: Stack, response_id: str) -> None:
    """The worker moves a finished response's events to SQL right after it ends."""
    client = redis_lib.Redis.from_url(stack.settings.redis_url)
    deadline = time.monotonic() + DEADLINE_S
    while [fields.keys() for _, fields in client.xrange(redis_keys.events(response_id))] != [{b"end", b"archived"}]:
        assert time.monotonic() < deadline, "the event log was not archived"
        time.sleep(POLL_S)
    client.close()


def test_retrieve_stream_after_archive_replays_the_live_bytes(stack: Stack) -> None:
    base_url = str(stack.client.base_url).removesuffix("/v1/")
    live = _raw_stream(base_url, "POST", "/v1/responses",
                       json={"model": MODEL, "input": "tokens 300", "background": True, "stream": True})
    response_id = parse_frame(live.split(b"\n\n")[0] + b"\n\n")["response"]["id"]
    _wait_for_tombstone(stack, response_id)
    other_url = str(stack.other.base_url).removesuffix("/v1/")
    replayed = _raw_stream(other_url, "GET", f"/v1/responses/{response_id}", params={"stream": "true"})
    assert replayed == live and b"response.completed" in replayed
    frames = [f + b"\n\n" for f in live.split(b"\n\n")[:-1]]
    after = _raw_stream(other_url, "GET", f"/v1/responses/{response_id}",
                        params={"stream": "true", "starting_after": 40})
    assert after == b"".join(frames[41:])


def test_responses_stream_helper_by_response_id(stack: Stack) -> None:
    created = stack.client.responses.create(model=MODEL, input="helper", background=True)
    with stack.other.responses.stream(response_id=created.id) as stream:
        final = stream.get_final_response()
    assert final.id == created.id and final.status == "completed" and "helper" in final.output_text


def test_cancel_response_mid_generation_stops_it(stack: Stack) -> None:
    stream = stack.client.responses.create(model=MODEL, input=LONG, background=True, stream=True)
    response_id = _read_until_text(stream)
    cancelled = stack.other.responses.cancel(response_id)
    assert cancelled.status == "cancelled"
    remaining = list(stream)  # the open stream ends too
    assert not any(e.type == "response.completed" for e in remaining)
    # Counted in tokens, not seconds (a stalled machine slows the engine too): at most two seconds of
    # generation after the first delta, of the answer's ten.
    assert sum(e.type == "response.output_text.delta" for e in remaining) <= 2 * TOKENS_PER_SECOND
    assert stack.db.run(get_response, response_id).status == "cancelled"


def test_cancel_response_completed_is_400(stack: Stack) -> None:
    created = stack.client.responses.create(model=MODEL, input="hi", background=True)
    assert wait_ended(stack.other, created.id).status == "completed"
    with pytest.raises(openai.BadRequestError) as error:
        stack.other.responses.cancel(created.id)
    assert error.value.body == {"message": "Cannot cancel a completed response.", "type": "invalid_request_error",
                                "param": None, "code": None}
    assert stack.client.responses.retrieve(created.id).status == "completed"


def test_three_turns_chained_by_previous_response_id(stack: Stack) -> None:
    one = stack.client.responses.create(model=MODEL, input="first apple")
    two = stack.other.responses.create(model=MODEL, input="second banana", previous_response_id=one.id)
    three = stack.client.responses.create(model=MODEL, input="third cherry", previous_response_id=two.id)
    assert three.status == "completed" and three.previous_response_id == two.id
    text = three.output_text
    assert "third cherry" in text
    assert text.index("first apple") < text.index("second banana")


def test_create_response_store_false_runs_but_is_not_retrievable(stack: Stack) -> None:
    response = stack.client.responses.create(model=MODEL, input="forget me", store=False)
    assert response.status == "completed" and "forget me" in response.output_text
    with pytest.raises(openai.NotFoundError):
        stack.other.responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError, match="Previous response with id .* not found"):
        stack.client.responses.create(model=MODEL, input="again", previous_response_id=response.id)


def test_create_response_stream_client_disconnect_cancels_it(stack: Stack) -> None:
    stream = stack.client.responses.create(model=MODEL, input=LONG, stream=True)
    response_id = _read_until_text(stream)
    stream.close()
    _wait_for_status(stack, response_id, "cancelled")


def test_create_response_enable_response_messages_returns_harmony_messages(stack: Stack) -> None:
    response = stack.client.responses.create(model=MODEL, input="show messages",
                                             extra_body={"enable_response_messages": True})
    extra = response.model_extra or {}
    assert extra["output_messages"]
    # The model's whole input, as vLLM returns it: the system message first, the new input last.
    assert extra["input_messages"][0]["role"] == "system"
    assert "show messages" in str(extra["input_messages"][-1])


def test_create_response_wait_client_disconnect_cancels_it(stack: Stack) -> None:
    before = _newest_response_id(stack)
    with pytest.raises(openai.APITimeoutError):
        stack.client.with_options(timeout=1.0).responses.create(model=MODEL, input=LONG)
    response_id = _newest_response_id(stack)
    assert response_id != before
    _wait_for_status(stack, response_id, "cancelled")


def test_turns_in_conversation_see_its_earlier_items(stack: Stack) -> None:
    conversation = stack.client.conversations.create(items=[{"role": "user", "content": "first apple"}])
    two = stack.client.responses.create(model=MODEL, input="second banana", conversation=conversation.id)
    three = stack.other.responses.create(model=MODEL, input="third cherry", conversation={"id": conversation.id})
    assert two.conversation is not None and two.conversation.id == conversation.id
    assert three.status == "completed"
    assert three.output_text == 'You said: "third cherry". Earlier you said: 1. "first apple" 2. "second banana"'
    # The response's own input items are its new input; the conversation holds every turn's, then its output.
    assert [item.content[0].text for item in stack.client.responses.input_items.list(three.id)] == ["third cherry"]  # type: ignore[union-attr]
    items = list(stack.client.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in items] == ["message", "message", "reasoning", "message", "message", "reasoning",
                                             "message"]
    assert [item.id for item in items[-2:]] == [item.id for item in three.output]  # type: ignore[union-attr]
    # Its row records how far the conversation went (four items then), not a copy of them.
    record = stack.db.run(get_response, three.id)
    assert record is not None and (record.request["input"], record.conversation_through) == ("third cherry", 3)


def test_response_continuing_turn_of_conversation_sees_conversation(stack: Stack) -> None:
    conversation = stack.client.conversations.create(items=[{"role": "user", "content": "first apple"}])
    turn = stack.client.responses.create(model=MODEL, input="second banana", conversation=conversation.id)
    later = stack.other.responses.create(model=MODEL, input="third cherry", previous_response_id=turn.id)
    assert later.output_text == 'You said: "third cherry". Earlier you said: 1. "first apple" 2. "second banana"'
    stack.client.conversations.delete(conversation.id)
    with pytest.raises(openai.BadRequestError) as caught:
        stack.other.responses.create(model=MODEL, input="fourth", previous_response_id=later.id)
    assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert f"conversation '{conversation.id}'" in caught.value.body["message"]  # type: ignore[index]


def test_store_false_turn_in_conversation_joins_it(stack: Stack) -> None:
    conversation = stack.client.conversations.create()
    response = stack.client.responses.create(model=MODEL, input="keep me", store=False, conversation=conversation.id)
    with pytest.raises(openai.NotFoundError):
        stack.other.responses.retrieve(response.id)
    items = list(stack.other.conversations.items.list(conversation.id, order="asc"))
    assert items[0].content[0].text == "keep me" and items[-1].id == response.output[-1].id  # type: ignore[union-attr]


def test_cancelled_turn_adds_nothing_to_conversation(stack: Stack) -> None:
    conversation = stack.client.conversations.create(items=[{"role": "user", "content": "before"}])
    stream = stack.client.responses.create(model=MODEL, input=LONG, background=True, stream=True,
                                           conversation=conversation.id)
    response_id = _read_until_text(stream)
    assert stack.other.responses.cancel(response_id).status == "cancelled"
    assert [item.content[0].text for item in stack.client.conversations.items.list(conversation.id)] == ["before"]  # type: ignore[union-attr]
