"""One response run in-process (``run_response_now``): what ends up in SQL and in the event stream."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest
import redis as redis_lib
from openai.types.responses import Response
from support.streams import archived_frames, assert_contiguous, events_of, is_closed, stream_entries, wait_for_event
from support.workers import accept, generating, overwrite_row, roll_back_row, worker_settings

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.storage import Database, delete_response, get_response, transition
from oss_responses.storage.conversations import ConversationRecord, delete_conversation, insert_conversation
from oss_responses.workers import runner, takeover
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.job import Job
from oss_responses.workers.reaper import Reaper
from oss_responses.workers.testing import local_worker, run_response_now


def final_text(response: dict) -> str:  # type: ignore[type-arg]
    messages = [item for item in response["output"] if item["type"] == "message"]
    return messages[-1]["content"][0]["text"]


def test_run_response_completes_row_and_stream(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="hello worker", background=True)
    assert run_response_now(response_id, worker=worker) == "completed"
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "completed"
    assert final_text(record.response) == 'You said: "hello worker".'
    assert record.input_messages and record.output_messages
    events = events_of(redis, response_id)
    assert_contiguous(events)
    assert [e["type"] for e in events[:3]] == ["response.created", "response.queued", "response.in_progress"]
    assert events[-1]["type"] == "response.completed" and is_closed(redis, response_id)


def test_run_response_leaves_no_reference_cycle_behind(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    # A finished run's callbacks (its cancel, its handoff, its lease's loss) held the run, and its lease held one
    # of them: ~120 objects a response (its job, generation, translator) stayed for the cyclic garbage collector,
    # whose young-generation passes then stopped the worker's engine loop (21 in 6,000 responses, up to 86 ms).
    warm = accept(db, redis, settings, input="tokens 5", background=True)
    assert run_response_now(warm, worker=worker) == "completed"
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage, not freed
    try:
        for _ in range(2):
            response_id = accept(db, redis, settings, input="tokens 5", background=True)
            assert run_response_now(response_id, worker=worker) == "completed"
        gc.collect()
        left = sorted({type(garbage).__qualname__ for garbage in gc.garbage
                       if type(garbage).__module__.startswith(("oss_responses", "openai"))})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []


@pytest.mark.parametrize("background", [True, False])
def test_run_response_whose_opening_events_expired_while_queued_writes_them_again(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings, background: bool
) -> None:
    # The accept's opening events expire (OSS_RESPONSES_EVENT_TTL_SECONDS) unless a worker claims the stream:
    # a response that waited longer in its queue began its stream at in_progress, numbered 0, so a follower
    # (which had seen 0 and 1) dropped in_progress and output_item.added, and a replay had no response.created.
    response_id = accept(db, redis, settings, input="tokens 7", background=background)
    opening = [fields[b"f"] for _, fields in stream_entries(redis, response_id)]
    redis.delete(redis_keys.events(response_id))
    assert run_response_now(response_id, worker=worker) == "completed"
    events = events_of(redis, response_id)
    assert_contiguous(events)
    assert [e["type"] for e in events[: len(opening) + 1]] == [
        "response.created", *(["response.queued"] if background else []), "response.in_progress"]
    assert archived_frames(response_id)[: len(opening)] == opening


def test_run_response_deletes_journal_when_stream_closes(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="tokens 7")
    run_response_now(response_id, worker=worker)
    assert is_closed(redis, response_id) and not redis.exists(redis_keys.journal(response_id))


def test_run_response_leaves_its_stream_no_longer_open(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="tokens 7")
    run_response_now(response_id, worker=worker)
    assert not redis.sismember(redis_keys.OPEN_STREAMS, response_id)


def test_run_response_shows_earlier_turns_of_the_chain(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    previous = None
    for text in ("one", "two", "three"):
        previous = accept(db, redis, settings, input=text, previous_response_id=previous)
        assert run_response_now(previous, worker=worker) == "completed"
    record = db.run(get_response, previous)
    assert final_text(record.response) == 'You said: "three". Earlier you said: 1. "one" 2. "two"'  # type: ignore[union-attr]


def _conversation(db: Database, *texts: str) -> str:
    record = ConversationRecord(id=f"conv_{'_'.join(texts)}", owner=None)
    items = [{"id": f"msg_{n}_{text}", "type": "message", "role": "user", "status": "completed",
              "content": [{"type": "input_text", "text": text}]} for n, text in enumerate(texts)]
    db.run(insert_conversation, record, items)
    return record.id


def _accept_in(db: Database, redis: redis_lib.Redis, settings: Settings, conversation_id: str, *, through: int,
               text: str) -> str:
    """A response in the conversation, accepted when its last item was at position ``through``."""
    response_id = accept(db, redis, settings, input=text, conversation=conversation_id)
    overwrite_row(db, response_id, conversation_through=through)
    return response_id


def test_run_response_in_conversation_sees_its_items_as_far_as_when_accepted(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    conversation_id = _conversation(db, "first", "added later")
    response_id = _accept_in(db, redis, settings, conversation_id, through=0, text="third")  # before "added later"
    assert run_response_now(response_id, worker=worker) == "completed"
    record = db.run(get_response, response_id)
    assert final_text(record.response) == 'You said: "third". Earlier you said: 1. "first"'  # type: ignore[union-attr]
    # The row keeps its own input, not a copy of the conversation.
    assert record.request["input"] == "third" and len(record.input_messages) == 1  # type: ignore[union-attr]


def test_run_response_continuing_turn_of_conversation_sees_conversation(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    conversation_id = _conversation(db, "zero")
    first = _accept_in(db, redis, settings, conversation_id, through=0, text="one")
    assert run_response_now(first, worker=worker) == "completed"
    second = accept(db, redis, settings, input="two", previous_response_id=first)
    assert run_response_now(second, worker=worker) == "completed"
    record = db.run(get_response, second)
    assert final_text(record.response) == 'You said: "two". Earlier you said: 1. "zero" 2. "one"'  # type: ignore[union-attr]


def test_run_response_fails_response_whose_conversation_was_deleted(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    conversation_id = _conversation(db, "gone")
    response_id = _accept_in(db, redis, settings, conversation_id, through=0, text="hi")
    db.run(delete_conversation, conversation_id)
    assert run_response_now(response_id, worker=worker) == "failed"
    record = db.run(get_response, response_id)
    assert f"conversation '{conversation_id}'" in record.response["error"]["message"]  # type: ignore[union-attr]


def _chain_of_long_turns(worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings,
                         **last: object) -> dict:  # type: ignore[type-arg]
    """Three turns of 100 words each, the last with ``last``'s fields; the last's stored Response."""
    previous = None
    for word, fields in (("alpha", {}), ("beta", {}), ("gamma", last)):
        fields = {"max_output_tokens": 300, **fields}
        previous = accept(db, redis, settings, input=f"{word} " * 100, previous_response_id=previous, **fields)
        run_response_now(previous, worker=worker)
    return db.run(get_response, previous).response  # type: ignore[union-attr]


@pytest.fixture
def small_context_worker(settings: Settings) -> Iterator[WorkerContext]:
    with local_worker(settings.model_copy(update={"scripted_context_tokens": 800})) as ctx:
        yield ctx


def test_run_response_with_truncation_auto_drops_earliest_turns_to_fit(
    small_context_worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response = _chain_of_long_turns(small_context_worker, db, redis, settings, truncation="auto")
    assert response["status"] == "completed"
    # 800 tokens of context, 300 kept for the answer: the conversation now begins at the second turn.
    assert response["usage"]["input_tokens"] <= 500
    earlier = final_text(response).split("Earlier you said: ")[1]
    assert earlier.startswith('1. "beta') and "alpha" not in earlier


def test_run_response_with_truncation_disabled_keeps_whole_conversation(
    small_context_worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response = _chain_of_long_turns(small_context_worker, db, redis, settings, max_output_tokens=1000)
    assert response["status"] == "completed" and response["usage"]["input_tokens"] > 500
    assert final_text(response).split("Earlier you said: ")[1].startswith('1. "alpha')


def test_run_response_without_max_output_tokens_stops_at_model_ceiling_below_default(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    # The API refuses a max_output_tokens above the model's ceiling: the default must not exceed it either.
    ceiling = {"max_output_tokens_ceilings": {settings.worker_model: 20}, "default_max_output_tokens": 4096}
    with local_worker(settings.model_copy(update=ceiling)) as ctx:
        response_id = accept(db, redis, settings, input="tokens 100")
        assert run_response_now(response_id, worker=ctx) == "incomplete"
    response = db.run(get_response, response_id).response  # type: ignore[union-attr]
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"]["output_tokens"] == 20


def test_run_response_whose_prompt_exceeds_context_fails_saying_so(
    small_context_worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="word " * 900, truncation="auto")
    assert run_response_now(response_id, worker=small_context_worker) == "failed"
    error = db.run(get_response, response_id).response["error"]  # type: ignore[union-attr]
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith("Your input exceeds the context window of this model: the prompt is ")
    assert "the model's context is 800 tokens" in error["message"]


LOOKUP = {"type": "function", "name": "lookup",
          "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}


def _tool_loop(steps: int, result_words: int = 150) -> list[dict]:  # type: ignore[type-arg]
    """An agent's loop as its client sends it back: one question asking for numbered calls, then ``steps``
    calls with their long results (the scripted model makes the call after the results it sees)."""
    question = "Research. " + " ".join(f'call functions.lookup {{"n": {n}}}' for n in range(1, steps + 2))
    items: list[dict] = [{"role": "user", "content": question}]  # type: ignore[type-arg]
    for n in range(1, steps + 1):
        result = f"result {n}: " + "fact " * result_words
        items += [
            {"type": "function_call", "call_id": f"call_{n}", "name": "lookup", "arguments": json.dumps({"n": n})},
            {"type": "function_call_output", "call_id": f"call_{n}", "output": result},
        ]
    return items


def test_run_response_with_truncation_auto_drops_earliest_tool_steps_of_a_loop(
    small_context_worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input=_tool_loop(4), tools=[LOOKUP], truncation="auto",
                         max_output_tokens=200)
    assert run_response_now(response_id, worker=small_context_worker) == "completed"
    response = db.run(get_response, response_id).response  # type: ignore[union-attr]
    assert response["usage"]["input_tokens"] <= 800 - 200
    call = response["output"][-1]
    # The question stayed (the model still follows it); it saw fewer than the four results sent.
    assert call["type"] == "function_call" and 1 < json.loads(call["arguments"])["n"] < 5


def test_run_response_of_a_loop_with_truncation_disabled_fails_advising_it(
    small_context_worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input=_tool_loop(4), tools=[LOOKUP], max_output_tokens=200)
    assert run_response_now(response_id, worker=small_context_worker) == "failed"
    error = db.run(get_response, response_id).response["error"]  # type: ignore[union-attr]
    assert error["code"] == "context_length_exceeded" and error["message"].endswith('or send truncation: "auto".')


def test_run_response_whose_last_tool_step_exceeds_context_fails_though_truncated(
    small_context_worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input=_tool_loop(2, result_words=900), tools=[LOOKUP],
                         truncation="auto")
    assert run_response_now(response_id, worker=small_context_worker) == "failed"
    error = db.run(get_response, response_id).response["error"]  # type: ignore[union-attr]
    assert error["code"] == "context_length_exceeded" and "the latest tool call with its result" in error["message"]


def test_run_response_skips_terminal_response(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="hi")
    run_response_now(response_id, worker=worker)
    count = len(events_of(redis, response_id))
    assert run_response_now(response_id, worker=worker) == "skipped"
    assert len(events_of(redis, response_id)) == count


def test_list_stream_open_when_task_of_ended_response_finds_it_unclosed(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    """A Redis restored from a snapshot taken while the response was queued: its task comes back, and its
    stream as the accept wrote it (no end marker, not listed open), though SQL ended it. The skipped task
    lists it open, so the reaper ends it rather than every replay waiting a day for an end."""
    response_id = accept(db, redis, settings, input="tokens 5", background=True)
    opening = stream_entries(redis, response_id)
    assert run_response_now(response_id, worker=worker) == "completed"
    whole = events_of(redis, response_id)
    redis.delete(redis_keys.events(response_id))
    for entry_id, fields in opening:
        redis.xadd(redis_keys.events(response_id), fields, id=entry_id)

    assert run_response_now(response_id, worker=worker) == "skipped"

    assert redis.sismember(redis_keys.OPEN_STREAMS, response_id)
    reaper = Reaper(db, redis, worker_id="test", interval_seconds=0.5, lease_seconds=3, event_ttl_seconds=60)
    assert reaper.reap_once() == [response_id]
    assert is_closed(redis, response_id) and events_of(redis, response_id) == whole


def test_run_response_skips_task_of_ended_response_whose_stream_key_holds_something_else(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A duplicate task of an ended response whose stream key was set to a string since: the check for an
    unclosed stream (its XREVRANGE) raised WRONGTYPE, a 'raised unexpected' and a traceback at ERROR."""
    response_id = accept(db, redis, settings, input="tokens 5", background=True)
    assert run_response_now(response_id, worker=worker) == "completed"
    redis.set(redis_keys.events(response_id), "not a stream")
    assert run_response_now(response_id, worker=worker) == "skipped"
    assert redis.get(redis_keys.events(response_id)) == b"not a stream"
    assert not redis.sismember(redis_keys.OPEN_STREAMS, response_id)
    assert any(redis_keys.events(response_id) in record.getMessage() for record in caplog.records)
    assert not [record for record in caplog.records if record.exc_info]


def test_run_response_stops_at_max_output_tokens_as_incomplete(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="tokens 500", max_output_tokens=40)
    assert run_response_now(response_id, worker=worker) == "incomplete"
    events = events_of(redis, response_id)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["usage"]["output_tokens"] == 40


def test_run_response_ends_with_function_call(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    response_id = accept(db, redis, settings, input='call functions.get_weather {"city": "Paris"}', tools=[tool])
    assert run_response_now(response_id, worker=worker) == "completed"
    record = db.run(get_response, response_id)
    call = record.response["output"][-1]  # type: ignore[union-attr]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert record.function_calls == {call["call_id"]: "get_weather"}  # type: ignore[union-attr]


def test_run_response_feeds_tool_error_without_executor(
    settings: Settings, db: Database, redis: redis_lib.Redis
) -> None:
    tool = {"type": "mcp", "server_label": "calc", "server_url": "https://calc.example.com/mcp",
            "require_approval": "never"}
    response_id = accept(db, redis, settings, input='call calc.add {"a": 1, "b": 2}', tools=[tool])
    with local_worker(settings, with_mcp=False) as worker:
        assert run_response_now(response_id, worker=worker) == "completed"
    output = db.run(get_response, response_id).response["output"]  # type: ignore[union-attr]
    mcp_call = next(item for item in output if item["type"] == "mcp_call")
    assert mcp_call["error"] is not None
    assert "no MCP tool executor" in final_text({"output": output})


def test_run_response_deletes_row_when_store_is_false(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="forget me", store=False)
    assert run_response_now(response_id, worker=worker) == "completed"
    assert db.run(get_response, response_id) is None
    assert events_of(redis, response_id)[-1]["type"] == "response.completed"
    assert is_closed(redis, response_id)


def test_run_response_expires_stream_soon_when_store_is_false(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    # No route reads an unstored response's stream once its client's own stream ended: it held its whole
    # output (~90 KB for 256 tokens) for the day of the event TTL.
    unstored = accept(db, redis, settings, input="tokens 7", store=False)
    stored = accept(db, redis, settings, input="tokens 7")
    run_response_now(unstored, worker=worker)
    run_response_now(stored, worker=worker)
    assert is_closed(redis, unstored)
    assert 0 < redis.ttl(redis_keys.events(unstored)) <= settings.unstored_event_ttl_seconds
    assert redis.ttl(redis_keys.events(stored)) > settings.unstored_event_ttl_seconds


def test_run_response_cancelled_while_queued_generates_nothing(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="hi", background=True)
    redis.set(redis_keys.cancel(response_id), "1")
    assert run_response_now(response_id, worker=worker) == "cancelled"
    assert db.run(get_response, response_id).status == "cancelled"  # type: ignore[union-attr]
    assert [e["type"] for e in events_of(redis, response_id)] == ["response.created", "response.queued"]
    assert is_closed(redis, response_id)


PERSON_FORMAT = {
    "type": "json_schema",
    "name": "person",
    "strict": True,
    "schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
               "additionalProperties": False},
}


def test_accept_stores_json_schema_response_that_round_trips(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="hi", text={"format": PERSON_FORMAT})
    stored = db.run(get_response, response_id).response  # type: ignore[union-attr]
    assert stored["text"]["format"]["schema"] == PERSON_FORMAT["schema"]
    assert Response.model_validate(stored).model_dump(mode="json", by_alias=True) == stored


def test_run_response_completes_json_schema_request(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="hi", text={"format": PERSON_FORMAT})
    assert run_response_now(response_id, worker=worker) == "completed"
    record = db.run(get_response, response_id)
    assert record.response["text"]["format"]["schema"] == PERSON_FORMAT["schema"]  # type: ignore[union-attr]


def assert_failed_at_once(db: Database, redis: redis_lib.Redis, response_id: str, message: str) -> None:
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "failed" and record.completed_at is not None
    assert message in record.error["message"]  # type: ignore[index]
    events = events_of(redis, response_id)
    assert_contiguous(events)
    assert events[-1]["type"] == "response.failed" and message in events[-1]["response"]["error"]["message"]
    assert is_closed(redis, response_id)


def test_run_response_fails_response_whose_stored_json_does_not_validate(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="hi", background=True)
    overwrite_row(db, response_id, response={"id": response_id, "status": 42})
    assert run_response_now(response_id, worker=worker) == "failed"
    assert_failed_at_once(db, redis, response_id, "cannot be loaded")


def test_run_response_fails_response_whose_stored_request_does_not_validate(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="hi")
    overwrite_row(db, response_id, request={"model": 42, "input": "hi"})
    assert run_response_now(response_id, worker=worker) == "failed"
    assert_failed_at_once(db, redis, response_id, "stored request")


def test_run_response_fails_response_whose_earlier_turn_does_not_load(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    first = accept(db, redis, settings, input="one")
    assert run_response_now(first, worker=worker) == "completed"
    overwrite_row(db, first, response={"output": 42})
    second = accept(db, redis, settings, input="two", previous_response_id=first)
    assert run_response_now(second, worker=worker) == "failed"
    assert_failed_at_once(db, redis, second, "cannot be loaded")


def test_run_response_whose_earlier_turn_was_deleted_since_it_was_accepted_fails_as_invalid_prompt(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Its client's doing (as deleting its conversation is), not the server's: not a server_error, and a WARNING
    # line in the worker's log, not an ERROR with a traceback.
    first = accept(db, redis, settings, input="one")
    assert run_response_now(first, worker=worker) == "completed"
    second = accept(db, redis, settings, input="two", previous_response_id=first)
    db.run(delete_response, first)
    assert run_response_now(second, worker=worker) == "failed"
    assert_failed_at_once(db, redis, second, "cannot go on")
    assert db.run(get_response, second).error["code"] == "invalid_prompt"  # type: ignore[union-attr, index]
    failed = [r for r in caplog.records if r.getMessage().startswith(f"response {second} failed")]
    assert [(r.levelname, r.exc_info) for r in failed] == [("WARNING", None)]


def test_run_response_fails_response_taken_over_too_often(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="hi", background=True)
    assert db.run(transition, response_id, from_statuses=("queued",), to_status="in_progress")
    redis.set(redis_keys.takeovers(response_id), settings.max_takeovers)
    assert run_response_now(response_id, worker=worker) == "failed"
    record = db.run(get_response, response_id)
    assert record is not None and "OSS_RESPONSES_MAX_TAKEOVERS" in record.error["message"]  # type: ignore[index]
    events = events_of(redis, response_id)
    assert_contiguous(events)
    assert events[-1]["type"] == "response.failed" and is_closed(redis, response_id)


def test_run_response_takes_over_lost_response_before_first_flush(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="hello again", background=True)
    assert db.run(transition, response_id, from_statuses=("queued",), to_status="in_progress")
    assert run_response_now(response_id, worker=worker) == "completed"
    events = events_of(redis, response_id)
    assert_contiguous(events)
    assert final_text(events[-1]["response"]) == 'You said: "hello again".'


def test_run_response_fails_response_whose_prompt_does_not_render_in_task_thread(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> list[int]:
        raise ValueError("no tokens today")

    monkeypatch.setattr(worker.tokenizer, "tokenize_blocking", broken)
    response_id = accept(db, redis, settings, input="hi")
    assert run_response_now(response_id, worker=worker) == "failed"
    assert_failed_at_once(db, redis, response_id, "no tokens today")
    types = [event["type"] for event in events_of(redis, response_id)]
    assert types[-2:] == ["response.in_progress", "response.failed"]  # the error surfaced where the loop renders


def assert_failed_overwritten(db: Database, redis: redis_lib.Redis, response_id: str) -> None:
    """Failed saying its log was overwritten; the key left as it is (expiring with the log), the run's other
    keys closed as an end closes them."""
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "failed"
    assert record.error is not None and (record.error["code"], record.error["message"]) == (
        "server_error", runner.OVERWRITTEN_MESSAGE)
    key = redis_keys.events(response_id)
    assert redis.get(key) == b"not a stream" and redis.ttl(key) > 0
    assert not redis.exists(redis_keys.journal(response_id), redis_keys.lease(response_id))
    assert not redis.sismember(redis_keys.OPEN_STREAMS, response_id)


@pytest.mark.parametrize("status", ["queued", "in_progress"])
def test_run_response_fails_response_whose_stream_key_holds_something_else(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings,
    caplog: pytest.LogCaptureFixture, status: str,
) -> None:
    """Its stream key set to a string (by hand, another application, a bug): the claim's read of it was a
    script error (WRONGTYPE) raised after the lease was taken, so the task raised, the lease lapsed and the
    reaper dispatched it again, every lease period for good, the response never ending."""
    response_id = accept(db, redis, settings, input="hi", background=True)
    if status == "in_progress":
        assert db.run(transition, response_id, from_statuses=("queued",), to_status="in_progress")
    redis.set(redis_keys.events(response_id), "not a stream")
    assert run_response_now(response_id, worker=worker) == "failed"
    assert_failed_overwritten(db, redis, response_id)
    assert any(redis_keys.events(response_id) in record.getMessage() for record in caplog.records)
    assert not [record for record in caplog.records if record.exc_info]


def test_run_response_completes_while_open_streams_key_holds_something_else(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The open streams' key set to a string (by hand, another application, a bug): its end's SREM was refused
    (WRONGTYPE), which failed the end's write, so every response on every worker was left to a takeover until a
    reaper's pass replaced the key. A member removed from a key that lists nothing is not listed: it completes."""
    response_id = accept(db, redis, settings, input="hi", background=True)
    redis.set(redis_keys.OPEN_STREAMS, "not a set")
    assert run_response_now(response_id, worker=worker) == "completed"
    assert db.run(get_response, response_id).status == "completed"
    [(_, last)] = redis.xrevrange(redis_keys.events(response_id), count=1)
    assert last[b"end"] == b"completed"
    assert redis.get(redis_keys.OPEN_STREAMS) == b"not a set"  # the reaper's to replace
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR or record.exc_info]


def test_run_response_whose_lease_is_lost_while_it_runs_stops_without_traceback(
    database_url: str, redis_url: str, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Its lease gone mid-generation (its worker paused past it and another took it over, or its key deleted by
    hand): its writes are refused by their guard, by design. That was logged as an ERROR and as "the event log
    is unreachable" with a traceback; the run stops saying its lease was lost, and a takeover completes it."""
    settings = worker_settings(database_url, redis_url, scripted_tokens_per_second=50.0)
    db = Database(settings.database_url)
    response_id = accept(db, redis, settings, input="tokens 40", background=True)
    with local_worker(settings) as worker, ThreadPoolExecutor(1) as pool:
        run = pool.submit(run_response_now, response_id, worker=worker)
        wait_for_event(redis, response_id, "response.output_text.delta")
        redis.delete(redis_keys.lease(response_id))
        assert run.result(timeout=30) == "lease_lost"
        assert run_response_now(response_id, worker=worker) == "completed"  # the takeover
    assert_contiguous(events_of(redis, response_id))
    assert any("lost its lease" in record.getMessage() for record in caplog.records)
    assert not [record for record in caplog.records if record.exc_info or record.levelno >= logging.ERROR]
    db.dispose()


def assert_failed_journal_overwritten(db: Database, redis: redis_lib.Redis, response_id: str) -> None:
    """Failed saying its journal was overwritten, after its last event (its stream is whole), closed as any end."""
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "failed"
    assert record.error is not None and (record.error["code"], record.error["message"]) == (
        "server_error", takeover.JOURNAL_OVERWRITTEN_MESSAGE)
    events = events_of(redis, response_id)
    assert_contiguous(events)
    assert events[-1]["type"] == "response.failed" and is_closed(redis, response_id)
    assert not redis.exists(redis_keys.journal(response_id), redis_keys.lease(response_id))
    assert not redis.sismember(redis_keys.OPEN_STREAMS, response_id)


def test_run_response_takeover_fails_response_whose_journal_key_holds_something_else(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its journal key set to a string (by hand, another application, a bug): the takeover's read of it raised
    WRONGTYPE after the lease was taken, so the task raised, let the lease go, and the reaper dispatched it
    again the next second, for good, the response never ending."""
    response_id = accept(db, redis, settings, input="hi", background=True)
    assert db.run(transition, response_id, from_statuses=("queued",), to_status="in_progress")
    redis.set(redis_keys.journal(response_id), "not a journal")
    assert run_response_now(response_id, worker=worker) == "failed"
    assert_failed_journal_overwritten(db, redis, response_id)
    assert any(redis_keys.journal(response_id) in record.getMessage() for record in caplog.records)
    assert not [record for record in caplog.records if record.exc_info]


@pytest.mark.parametrize("overwritten", ["stream", "journal"])
def test_run_response_whose_key_is_overwritten_while_it_runs_fails_alone(
    database_url: str, redis_url: str, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture, overwritten: str
) -> None:
    """Its stream's or journal's key set to a string mid-generation: its writes are refused (WRONGTYPE) in
    flushes it shares with another running response, which goes on; the run leaves it to a takeover, which
    fails it."""
    key_of, assert_failed = {
        "stream": (redis_keys.events, assert_failed_overwritten),
        "journal": (redis_keys.journal, assert_failed_journal_overwritten),
    }[overwritten]
    settings = worker_settings(database_url, redis_url, scripted_tokens_per_second=50.0)
    db = Database(settings.database_url)
    victim, bystander = (accept(db, redis, settings, input="tokens 40", background=True) for _ in range(2))
    with local_worker(settings) as worker, ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(run_response_now, response_id, worker=worker) for response_id in (victim, bystander)]
        wait_for_event(redis, victim, "response.output_text.delta")
        redis.delete(key_of(victim))
        redis.set(key_of(victim), f"not a {overwritten}")
        assert [run.result(timeout=30) for run in runs] == ["lease_lost", "completed"]
        assert run_response_now(victim, worker=worker) == "failed"  # the takeover
    assert_failed(db, redis, victim)
    events = events_of(redis, bystander)
    assert_contiguous(events)
    assert events[-1]["type"] == "response.completed" and is_closed(redis, bystander)
    assert not [record for record in caplog.records if record.exc_info]
    db.dispose()


@pytest.mark.parametrize("status", ["queued", "in_progress"])
def test_run_response_fails_saying_so_when_database_is_older_than_its_ended_stream(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings, status: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The rollback probe: PostgreSQL restored to a copy taken while the response ran; it had completed (stream
    # closed and archived) since. Taken over, it wrote behind the end marker and failed after 3 takeovers with
    # "JournalError: the stream of this response was closed while it was in progress" and a traceback.
    response_id = accept(db, redis, settings, input="tokens 7", background=True)
    earlier = db.run(get_response, response_id)
    assert earlier is not None and run_response_now(response_id, worker=worker) == "completed"
    tombstone = stream_entries(redis, response_id)
    roll_back_row(db, replace(earlier, status=status))
    assert run_response_now(response_id, worker=worker) == "failed"
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "failed" and record.completed_at is not None
    assert record.error["message"].startswith(  # type: ignore[index]
        f"database_behind: the event log of this response says it ended completed, but the database still had it "
        f"{status}")
    assert stream_entries(redis, response_id) == tombstone  # what its clients saw is left as it is
    assert not redis.exists(redis_keys.journal(response_id))
    assert not [entry for entry in caplog.records if entry.exc_info]


def test_run_response_skips_quietly_when_its_row_ended_after_the_task_loaded_it(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    # A task delivered twice: it loaded the row while another run held the lease, which then saved the end and
    # closed the stream. An ended stream beside a running row is then no rollback: nothing fails, no warning.
    response_id = accept(db, redis, settings, input="tokens 7", background=True)
    loaded = db.run(get_response, response_id)
    assert loaded is not None and run_response_now(response_id, worker=worker) == "completed"
    real_load_job = runner.load_job

    def load_before_the_end(*args: Any, **kwargs: Any) -> Job | None:
        job = real_load_job(*args, **kwargs)
        assert job is not None
        job.record = replace(job.record, status=loaded.status)
        return job

    monkeypatch.setattr(runner, "load_job", load_before_the_end)
    assert run_response_now(response_id, worker=worker) == "skipped"
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "completed"
    assert not [entry for entry in caplog.records if entry.levelno >= logging.WARNING]


@pytest.mark.parametrize(("client_deleted", "level"), [(True, logging.INFO), (False, logging.WARNING)],
                         ids=["deleted by its client", "lost by the database"])
def test_run_response_whose_row_is_gone_at_its_end_logs_why(
    database_url: str, redis_url: str, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture,
    client_deleted: bool, level: int,
) -> None:
    # The rollback probe: a row the database lost (restored from before it existed) while its response ran was
    # logged at INFO as "deleted while it ran", as a client's DELETE is; a client's DELETE cancels first.
    caplog.set_level(logging.INFO, logger="oss_responses.workers.run_end")
    with generating(database_url, redis_url, redis, tokens=60) as run:
        db, response_id = run.db, run.response_id
        if client_deleted:  # its flag first, as the API's DELETE sets it; published after the row is gone, so
            redis.set(redis_keys.cancel(response_id), "1")  # that the run cannot save its end before
        assert db.run(delete_response, response_id)
        if client_deleted:
            redis.publish(redis_keys.CANCEL_CHANNEL, response_id)
        run.running.result(timeout=20)
    [line] = [entry for entry in caplog.records if entry.name == "oss_responses.workers.run_end"
              and ("deleted while it ran" in entry.getMessage() or "row is gone" in entry.getMessage())]
    assert line.levelno == level
    assert ("no client deleted it" in line.getMessage()) is not client_deleted
    assert is_closed(redis, response_id)
    db.dispose()


def test_run_response_with_stream_interval_streams_the_same_response_in_fewer_deltas(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    every_token = accept(db, redis, settings, input="tokens 40")
    assert run_response_now(every_token, worker=worker) == "completed"
    with local_worker(settings.model_copy(update={"stream_interval": 4}), with_mcp=False) as grouped_worker:
        grouped = accept(db, redis, settings, input="tokens 40")
        assert run_response_now(grouped, worker=grouped_worker) == "completed"

    def deltas(response_id: str) -> list[str]:
        return [e["delta"] for e in events_of(redis, response_id) if e["type"] == "response.output_text.delta"]

    events = events_of(redis, grouped)
    assert_contiguous(events)
    assert "".join(deltas(grouped)) == "".join(deltas(every_token))
    assert len(deltas(grouped)) < len(deltas(every_token)) / 3
    saved = [db.run(get_response, rid) for rid in (every_token, grouped)]
    assert final_text(saved[0].response) == final_text(saved[1].response)  # type: ignore[union-attr]
    assert saved[0].response["usage"] == saved[1].response["usage"]  # type: ignore[union-attr]


@pytest.mark.parametrize(("value", "resume_mark", "count"), [
    (["not a count"], None, 1), ("not a count", None, 1), (["not a count"], "handoff", 0), ("1.5", "handoff", 0),
])
def test_run_response_takeover_counts_again_from_itself_when_takeovers_key_holds_something_else(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings,
    caplog: pytest.LogCaptureFixture, value: Any, resume_mark: str | None, count: int,
) -> None:
    """Its takeovers counter replaced by a list or a string that is no integer (by hand, another application, a
    bug): the takeover's INCR (or a handoff's int(GET)) raised after the lease was taken, so the task raised,
    let the lease go, and the reaper dispatched it again the next second, for good. Its count is unknown: it
    starts again from this takeover (later takeovers count up from it, so max_takeovers still bounds it)."""
    response_id = accept(db, redis, settings, input="hello again", background=True)
    assert db.run(transition, response_id, from_statuses=("queued",), to_status="in_progress")
    key = redis_keys.takeovers(response_id)
    if isinstance(value, list):
        redis.rpush(key, *value)
    else:
        redis.set(key, value)
    if resume_mark:
        redis.set(redis_keys.resume(response_id), resume_mark)
    assert run_response_now(response_id, worker=worker) == "completed"
    assert redis.get(key) == str(count).encode() and redis.ttl(key) > 0
    assert any(key in record.getMessage() for record in caplog.records)
    assert not [record for record in caplog.records if record.exc_info]
