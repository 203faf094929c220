"""POST /v1/responses without a worker: what is written when a request is accepted."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from typing import Any

import httpx2
import openai
import pytest
import redis as redis_lib
from openai import AsyncOpenAI, OpenAI
from openai.types.responses import ResponseCompletedEvent, ResponseInProgressEvent
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from support import MODEL
from support.api_server import ApiServer
from support.workers import accept, overwrite_row

from oss_responses import redis_keys
from oss_responses.api import jobs
from oss_responses.api.jobs import PLAN_ON_LOOP_MESSAGES
from oss_responses.config import Settings
from oss_responses.conversation import history_of
from oss_responses.eventlog import parse_frame
from oss_responses.eventlog.writes import close_commands, event_commands
from oss_responses.harmony.emitter import EventEmitter
from oss_responses.harmony.lifecycle import placeholder_response
from oss_responses.harmony.render import plan_conversation
from oss_responses.sealing import build_sealer, open_secrets
from oss_responses.storage import delete_response, get_chain, get_response, list_input_items
from oss_responses.workers.testing import local_worker, run_response_now


def _queued_task(redis: redis_lib.Redis, queue: str) -> dict:
    [message] = redis.lrange(queue, 0, -1)
    envelope = json.loads(message)
    return {"headers": envelope["headers"], "body": json.loads(base64.b64decode(envelope["body"]))}


def test_create_response_background_returns_queued_response(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="hello", background=True, metadata={"k": "v"},
                                       instructions="be brief", temperature=0.5, max_output_tokens=64)
    assert response.id.startswith("resp_")
    assert response.status == "queued"
    assert response.background is True
    assert (response.model, response.instructions, response.metadata) == (MODEL, "be brief", {"k": "v"})
    assert (response.temperature, response.max_output_tokens, response.output) == (0.5, 64, [])


def test_create_response_opening_events_expire_unless_a_worker_claims_them(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis
) -> None:
    """Should Redis fail between the opening events and the task (a 503, nothing stored), the undo may not
    reach Redis either: the events then expire rather than stay for good (found by an outside probe)."""
    response = client.responses.create(model=MODEL, input="hello", background=True)
    ttl = redis.ttl(redis_keys.events(response.id))
    assert 0 < ttl <= api.settings.event_ttl_seconds


def test_create_response_background_stores_row_and_input_items(client: OpenAI, api: ApiServer) -> None:
    response = client.responses.create(
        model=MODEL, background=True,
        input=[{"role": "developer", "content": "rules"},
               {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
    )
    record = api.db.run(get_response, response.id)
    assert record is not None and record.status == "queued" and record.background and record.store
    assert record.response["id"] == response.id
    items, has_more = api.db.run(list_input_items, response.id, order="asc")
    assert [(i["role"], i["content"][0]["text"]) for i in items] == [("developer", "rules"), ("user", "hi")]
    assert all(i["id"].startswith("msg_") for i in items) and not has_more


def test_create_response_keeps_nul_character_of_input(client: OpenAI, api: ApiServer) -> None:
    response = client.responses.create(model=MODEL, background=True, input="before\x00after")
    items = client.responses.input_items.list(response.id)
    assert items.data[0].content[0].text == "before\x00after"  # type: ignore[union-attr]
    assert api.db.run(get_response, response.id).request["input"] == "before\x00after"  # type: ignore[union-attr]


def test_create_response_background_writes_opening_events(client: OpenAI, redis: redis_lib.Redis) -> None:
    response = client.responses.create(model=MODEL, input="hello", background=True)
    entries = redis.xrange(redis_keys.events(response.id))
    events = [parse_frame(fields[b"f"]) for _, fields in entries]
    assert [(e["type"], e["sequence_number"]) for e in events] == [("response.created", 0), ("response.queued", 1)]
    assert [entry_id for entry_id, _ in entries] == [b"0-1", b"0-2"]
    assert events[0]["response"]["status"] == "queued"


def test_create_response_enqueues_task_on_model_queue(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis
) -> None:
    response = client.responses.create(model="gpt-oss-120b", input="hello", background=True)
    task = _queued_task(redis, api.settings.queue_for("gpt-oss-120b"))
    assert task["headers"]["task"] == "oss_responses.run_response"
    assert task["body"][0] == [response.id, {}]


def test_create_response_strips_mcp_secrets(client: OpenAI, api: ApiServer, redis: redis_lib.Redis) -> None:
    tool = {"type": "mcp", "server_label": "calc", "server_url": "https://calc.example/mcp",
            "authorization": "sk-secret", "headers": {"X-Key": "secret"}, "require_approval": "never"}
    response = client.responses.create(model=MODEL, input="hi", background=True, tools=[tool])
    echoed = response.tools[0].model_dump()
    assert echoed["server_label"] == "calc" and echoed.get("authorization") is None and echoed.get("headers") is None
    record = api.db.run(get_response, response.id)
    assert "secret" not in json.dumps([record.request, record.response])
    assert "secret" not in b"".join(f[b"f"] for _, f in redis.xrange(redis_keys.events(response.id))).decode()
    task = _queued_task(redis, api.settings.queue_for(MODEL))
    assert task["body"][0] == [response.id, {}]  # the task names the response only
    assert record.sealed_secrets and "secret" not in record.sealed_secrets
    sealer = build_sealer(api.settings.encryption_key_values)
    sealed = open_secrets(sealer, record.sealed_secrets)  # type: ignore[arg-type]
    assert sealed == {"calc": {"authorization": "sk-secret", "headers": {"X-Key": "secret"}}}


def test_create_response_echoes_request_settings(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL, input="hi, in json", background=True, top_p=0.9, parallel_tool_calls=False,
        reasoning={"effort": "low"}, text={"format": {"type": "json_object"}}, tool_choice="none",
        tools=[{"type": "function", "name": "f", "strict": True,
               "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}],
    )
    assert (response.top_p, response.parallel_tool_calls, response.tool_choice) == (0.9, False, "none")
    assert response.reasoning.effort == "low" and response.text.format.type == "json_object"
    assert response.tools[0].name == "f"


@pytest.mark.parametrize("flag", [True, False])
def test_create_response_enable_response_messages_adds_message_lists(client: OpenAI, flag: bool) -> None:
    response = client.responses.create(model=MODEL, input="hi", background=True,
                                       extra_body={"enable_response_messages": flag})
    extra = response.model_extra or {}
    assert ("input_messages" in extra) is flag and ("output_messages" in extra) is flag


def test_create_response_echoes_effort_as_requested_and_hides_client_metadata(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL, input="hi", background=True, reasoning={"effort": "xhigh", "summary": "auto"},
        service_tier="flex", prompt_cache_key="k", extra_body={"client_metadata": {"session_id": "s"}},
    )
    assert (response.reasoning.effort, response.reasoning.summary) == ("xhigh", "auto")
    assert (response.service_tier, response.prompt_cache_key) == ("default", "k")
    assert "client_metadata" not in response.model_dump()


def test_create_response_echoes_reasoning_context_and_mode_gpt_oss_runs(client: OpenAI) -> None:
    # openai's Reasoning: "When returned on a response, this is the effective" context and mode.
    response = client.responses.create(model=MODEL, input="hi", background=True,
                                       reasoning={"effort": "low", "context": "all_turns", "mode": "pro"})
    assert response.reasoning is not None
    assert (response.reasoning.context, response.reasoning.mode) == ("current_turn", "standard")


def test_create_response_echoes_openai_defaults_of_fields_left_out(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="hi", background=True)
    assert (response.service_tier, response.top_logprobs) == ("default", 0)
    assert response.text is not None and response.text.verbosity == "medium"


def test_create_response_timestamps_are_integers(http: httpx2.Client) -> None:
    body = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True}).json()
    assert isinstance(body["created_at"], int)


def test_create_response_stream_not_background_starts_in_progress(client: OpenAI) -> None:
    with client.responses.create(model=MODEL, input="hi", stream=True) as stream:
        created = next(iter(stream))
    assert (created.type, created.response.status) == ("response.created", "in_progress")


def test_create_response_stores_input_as_harmony_messages(client: OpenAI, api: ApiServer) -> None:
    response = client.responses.create(model=MODEL, input="remember me", background=True)
    record = api.db.run(get_response, response.id)
    assert [(m["role"], m["content"][0]["text"]) for m in record.input_messages] == [("user", "remember me")]


def test_create_response_continues_conversation_after_cancelled_queued_turn(client: OpenAI, api: ApiServer) -> None:
    cancelled = client.responses.create(model=MODEL, input="never ran", background=True)
    client.responses.cancel(cancelled.id)
    later = client.responses.create(model=MODEL, input="next", background=True, previous_response_id=cancelled.id)
    history = history_of(api.db.run(get_chain, cancelled.id))
    assert "never ran" in json.dumps(history[0].messages)
    assert later.previous_response_id == cancelled.id


def test_create_response_resending_input_item_of_previous_response_is_bad_request(
    client: OpenAI, api: ApiServer
) -> None:
    # The id the first turn's string input was stored under (what its input_items list), sent back as a message.
    first = client.responses.create(model=MODEL, input="original words", background=True)
    client.responses.cancel(first.id)
    [stored] = api.db.run(list_input_items, first.id, order="asc")[0]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, background=True, previous_response_id=first.id, input=[
            {"type": "message", "role": "user", "content": "original words", "id": stored["id"]},
        ])
    assert refused.value.body["param"] == "input"  # type: ignore[index]
    assert refused.value.body["message"].startswith(f"Duplicate item found with id {stored['id']}.")  # type: ignore[index]


def test_create_response_resolves_item_reference_from_conversation(client: OpenAI, api: ApiServer) -> None:
    first = client.responses.create(model=MODEL, input="original words", background=True)
    client.responses.cancel(first.id)
    [stored] = api.db.run(list_input_items, first.id, order="asc")[0]
    second = client.responses.create(model=MODEL, background=True, previous_response_id=first.id,
                                     input=[{"type": "item_reference", "id": stored["id"]}])
    [resolved] = api.db.run(list_input_items, second.id, order="asc")[0]
    assert (resolved["type"], resolved["content"][0]["text"]) == ("message", "original words")


def test_create_response_after_deleted_earlier_turn_is_400(client: OpenAI, http: httpx2.Client) -> None:
    first = client.responses.create(model=MODEL, input="one", background=True)
    client.responses.cancel(first.id)
    second = client.responses.create(model=MODEL, input="two", background=True, previous_response_id=first.id)
    client.responses.cancel(second.id)
    client.responses.delete(first.id)
    response = http.post("/v1/responses", json={"model": MODEL, "input": "three", "previous_response_id": second.id})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "previous_response_id" and first.id in error["message"]


def test_create_responses_burst_beyond_redis_pools_accepts_every_one(api: ApiServer, redis: redis_lib.Redis) -> None:
    """More concurrent POSTs than a Redis pool's 100 connections (redis-py refuses the 101st by default:
    half of such a burst was answered 503): every one is accepted, stored and queued."""
    burst = 250

    async def create_all() -> list[str]:
        async with AsyncOpenAI(base_url=f"{api.base_url}/v1", api_key="test", max_retries=0, timeout=60) as sdk:
            created = await asyncio.gather(*(sdk.responses.create(model=MODEL, input=f"hi {n}", background=True)
                                             for n in range(burst)))
        return [response.id for response in created if response.status == "queued"]

    ids = asyncio.run(create_all())
    assert len(set(ids)) == burst
    assert redis.llen(api.settings.queue_for(MODEL)) == burst
    assert all(api.db.run(get_response, response_id) is not None for response_id in ids[:: burst // 10])


@pytest.mark.parametrize(("earlier", "new"), [(0, 1), (0, PLAN_ON_LOOP_MESSAGES), (1, PLAN_ON_LOOP_MESSAGES - 1),
                                              (0, PLAN_ON_LOOP_MESSAGES + 1), (1, PLAN_ON_LOOP_MESSAGES)])
def test_create_response_plans_small_conversations_on_the_loop_and_large_ones_off_it(
    client: OpenAI, monkeypatch: pytest.MonkeyPatch, earlier: int, new: int
) -> None:
    """A thread hop costs the loop more than planning a few messages; planning many would stall it."""
    previous = None
    if earlier:  # one earlier turn, cancelled while queued: its input, one message
        previous = client.responses.create(model=MODEL, input="first", background=True).id
        client.responses.cancel(previous)
    planned_in: list[str] = []

    def plan(*args: object) -> object:
        planned_in.append(threading.current_thread().name)
        return plan_conversation(*args)

    monkeypatch.setattr("oss_responses.api.jobs.plan_conversation", plan)
    items = [{"role": "user", "content": f"message {n}"} for n in range(new)]
    client.responses.create(model=MODEL, input=items, background=True, previous_response_id=previous)
    on_loop = earlier + new <= PLAN_ON_LOOP_MESSAGES
    assert [name.startswith("uvicorn-") for name in planned_in] == [on_loop]


def _running_with_events(api: ApiServer, redis: redis_lib.Redis, settings: Settings, last: type) -> str:
    """A stored response a worker runs: in_progress in SQL, its log holding events up to one of ``last``."""
    response_id = accept(api.db, redis, settings, input="first")
    overwrite_row(api.db, response_id, status="in_progress")
    response = placeholder_response(response_id, MODEL, 0.0).model_copy(update={"status": "completed"})
    fields = {"response": response} if last is ResponseCompletedEvent else {"response": response.model_copy(
        update={"status": "in_progress"})}
    with redis.pipeline(transaction=False) as pipe:
        for command in event_commands(response_id, [EventEmitter(1).emit(last, **fields)]):
            pipe.execute_command(*command)
        pipe.execute()
    return response_id


def _save_and_end(api: ApiServer, redis: redis_lib.Redis, response_id: str) -> None:
    """The worker's last steps: the turn saved, then the log ended."""
    stored = api.db.run(get_response, response_id).response
    overwrite_row(api.db, response_id, status="completed", response=stored | {"status": "completed"})
    with redis.pipeline(transaction=False) as pipe:
        for command in close_commands(response_id, "completed", ttl_seconds=60):
            pipe.execute_command(*command)
        pipe.execute()


def _save_and_end_soon(api: ApiServer, redis: redis_lib.Redis, response_id: str) -> threading.Thread:
    """The worker's last steps, 0.3 s from now."""
    def save_and_end() -> None:
        time.sleep(0.3)
        _save_and_end(api, redis, response_id)

    worker = threading.Thread(target=save_and_end)
    worker.start()
    return worker


def _ends_right_after_read(
    api: ApiServer, redis: redis_lib.Redis, response_id: str, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    """The worker saves the turn and ends the log right after the API's first SQL read of it (``reader``:
    the storage function in ``api.jobs`` that reads it), before the API reads the log."""
    real, ended = getattr(jobs, reader), []

    def read_then_end(session: Any, wanted: str, *rest: Any) -> Any:
        found = real(session, wanted, *rest)
        if wanted == response_id and not ended:
            ended.append(wanted)
            _save_and_end(api, redis, response_id)
        return found

    monkeypatch.setattr(jobs, reader, read_then_end)


def test_create_response_continuing_response_whose_terminal_event_is_written_waits_for_its_save(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis, settings: Settings
) -> None:
    # The worker writes the terminal event, saves the turn, then ends the log: a client that continues
    # the response on reading that event (over the WebSocket, at once) must not find it still running.
    previous = _running_with_events(api, redis, settings, ResponseCompletedEvent)
    worker = _save_and_end_soon(api, redis, previous)
    created = client.responses.create(model=MODEL, input="next", previous_response_id=previous, background=True)
    worker.join()
    assert created.previous_response_id == previous


def test_retrieve_response_whose_terminal_event_is_written_returns_it_ended(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = _running_with_events(api, redis, settings, ResponseCompletedEvent)
    worker = _save_and_end_soon(api, redis, response_id)
    retrieved = client.responses.retrieve(response_id)
    worker.join()
    assert retrieved.status == "completed"


def test_retrieve_response_ended_between_its_sql_and_its_log_reads_returns_it_ended(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its log ends (its end marker, then its archive) once the turn is saved: no terminal event to see
    # there then, and SQL read a moment earlier said in_progress (the race probe: 2-5 in 100 GETs).
    response_id = _running_with_events(api, redis, settings, ResponseCompletedEvent)
    _ends_right_after_read(api, redis, response_id, monkeypatch, "get_owned_response")

    assert client.responses.retrieve(response_id).status == "completed"


def test_create_response_continuing_response_ended_between_its_sql_and_its_log_reads_is_accepted(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    previous = _running_with_events(api, redis, settings, ResponseCompletedEvent)
    _ends_right_after_read(api, redis, previous, monkeypatch, "get_chain")

    created = client.responses.create(model=MODEL, input="next", previous_response_id=previous, background=True)

    assert created.previous_response_id == previous


def test_create_response_continuing_response_deleted_meanwhile_is_previous_response_not_found(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DELETE of the previous response lands between the create's load of it and its insert (the race
    # probe: 24 of 120 such creates were a 500, the insert's foreign key refused).
    previous = accept(api.db, redis, settings, input="first")
    overwrite_row(api.db, previous, status="completed")
    real = jobs.insert_accepted

    def deleted_first(session: Any, *args: Any, **kwargs: Any) -> None:
        api.db.run(delete_response, previous)
        real(session, *args, **kwargs)

    monkeypatch.setattr(jobs, "insert_accepted", deleted_first)

    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="next", previous_response_id=previous, background=True)

    assert (refused.value.code, refused.value.param) == ("previous_response_not_found", "previous_response_id")


def test_create_response_continuing_running_response_is_400(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis, settings: Settings
) -> None:
    previous = _running_with_events(api, redis, settings, ResponseInProgressEvent)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="next", previous_response_id=previous, background=True)
    assert refused.value.param == "previous_response_id" and "still in_progress" in refused.value.message


def test_create_response_waited_for_whose_final_read_finds_database_away_returns_its_terminal_event(
    client: OpenAI, api: ApiServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The PostgreSQL probe (max_connections reached, 200 concurrent creates): 3 waited-for creates ran to
    # completion and answered 503 "Retry shortly." (the SDK retries it: the response runs again).
    def database_away(*_: Any) -> None:
        raise OperationalError("SELECT", {}, Exception("sorry, too many clients already"))

    monkeypatch.setattr(jobs, "get_response", database_away)
    with local_worker(settings) as worker:
        runner = threading.Thread(target=lambda: run_response_now(_first_queued(api), worker=worker))
        runner.start()
        response = client.responses.create(model=MODEL, input="tokens 5")
        runner.join()

    stored = api.db.run(get_response, response.id)
    assert stored is not None
    assert (response.status, response.output_text) == ("completed", stored.response["output"][-1]["content"][0]["text"])


def _first_queued(api: ApiServer, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with api.db.engine.connect() as connection:
            found = connection.execute(text("SELECT id FROM responses WHERE status = 'queued'")).scalar()
        if found is not None:
            return str(found)
        time.sleep(0.02)
    raise AssertionError("no response was accepted")
