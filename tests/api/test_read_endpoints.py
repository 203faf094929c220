"""GET /v1/responses/{id}, its input items, DELETE, and cancel of a response no worker took yet."""

from __future__ import annotations

import httpx2
import openai
import pytest
import redis as redis_lib
from openai import OpenAI
from support import MODEL
from support.api_server import ApiServer

from oss_responses import redis_keys
from oss_responses.eventlog import parse_frame
from oss_responses.storage import get_response
from oss_responses.workers.archive import archive_event_log


def test_retrieve_response_returns_stored_response(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True, metadata={"a": "b"})
    fetched = client.responses.retrieve(created.id)
    assert fetched.model_dump() == created.model_dump()


def test_retrieve_response_stream_replays_log_from_created(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True)
    client.responses.cancel(created.id)  # closes the log, so the replay ends
    events = list(client.responses.retrieve(created.id, stream=True))
    assert [(e.type, e.sequence_number) for e in events] == [("response.created", 0), ("response.queued", 1)]


def test_retrieve_response_stream_starting_after_skips_seen_events(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True)
    client.responses.cancel(created.id)
    events = list(client.responses.retrieve(created.id, stream=True, starting_after=0))
    assert [e.type for e in events] == ["response.queued"]


def test_retrieve_response_stream_without_log_is_404(client: OpenAI, redis: redis_lib.Redis) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True)
    redis.delete(redis_keys.events(created.id))
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id, stream=True)


def test_retrieve_response_stream_starting_after_past_its_running_log_ends_with_error_event(
    client: OpenAI, http: httpx2.Client
) -> None:
    """A queued response's log holds events 0 and 1: a client that says it got event 5 got it from a log Redis
    lost since (or made the number up). It is told so, rather than given the events a takeover writes anew
    under numbers it passed."""
    created = client.responses.create(model=MODEL, input="hi", background=True)
    answer = http.get(f"/v1/responses/{created.id}", params={"stream": "true", "starting_after": "5"})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    [event] = [parse_frame(chunk.encode() + b"\n\n") for chunk in answer.text.split("\n\n") if chunk]
    assert (event["type"], event["code"], event["sequence_number"]) == ("error", "event_log_lost", 6)


@pytest.mark.parametrize("starting_after", [None, 0])
def test_retrieve_response_stream_of_overwritten_log_ends_with_error_event(
    client: OpenAI, http: httpx2.Client, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture,
    starting_after: int | None,
) -> None:
    """The stream's key left holding a string (by hand, or a bug): Redis refuses the replay's first read
    (WRONGTYPE), which was a 500 and a traceback; a client following the stream gets this same event."""
    created = client.responses.create(model=MODEL, input="hi", background=True)
    redis.set(redis_keys.events(created.id), "not a stream")
    params = {"stream": "true"} | ({} if starting_after is None else {"starting_after": str(starting_after)})
    answer = http.get(f"/v1/responses/{created.id}", params=params)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    [event] = [parse_frame(chunk.encode() + b"\n\n") for chunk in answer.text.split("\n\n") if chunk]
    assert (event["type"], event["code"]) == ("error", "event_log_lost")
    assert event["sequence_number"] == (0 if starting_after is None else starting_after + 1)
    assert "overwritten" in event["message"]
    assert not [record for record in caplog.records if record.exc_info]


@pytest.mark.parametrize("value", ["list", "garbage"])
def test_retrieve_response_stream_starting_after_with_overwritten_rewound_mark_replays_the_rest(
    client: OpenAI, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    """The key marking events written anew (``eventlog/rewinds.py``) left holding a list or a string that is no
    span (by hand, another application, a bug): a resume was a 500 with a traceback (WRONGTYPE, or int() of
    it). It is no mark, with a WARNING naming the key."""
    created = client.responses.create(model=MODEL, input="hi", background=True)
    client.responses.cancel(created.id)  # closes the log, so the replay ends
    key = redis_keys.rewound(created.id)
    if value == "list":
        redis.rpush(key, "0 1")
    else:
        redis.set(key, value)
    events = list(client.responses.retrieve(created.id, stream=True, starting_after=0))
    assert [e.type for e in events] == ["response.queued"]
    assert any(key in record.getMessage() and record.levelname == "WARNING" for record in caplog.records)
    assert not [record for record in caplog.records if record.exc_info]


def test_retrieve_response_stream_of_overwritten_archived_log_replays_it(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis
) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True)
    client.responses.cancel(created.id)  # closes the log
    assert archive_event_log(api.db, redis, created.id, ttl_seconds=60)
    redis.set(redis_keys.events(created.id), "not a stream")
    events = list(client.responses.retrieve(created.id, stream=True))
    assert [(e.type, e.sequence_number) for e in events] == [("response.created", 0), ("response.queued", 1)]


def test_list_input_items_pages_with_sdk(client: OpenAI) -> None:
    texts = [f"message {i}" for i in range(7)]
    created = client.responses.create(model=MODEL, background=True,
                                      input=[{"role": "user", "content": text} for text in texts])
    page = client.responses.input_items.list(created.id, limit=3, order="asc")
    assert len(page.data) == 3 and page.has_more
    assert [item.content[0].text for item in page] == texts  # auto-paging follows ``after``


def test_list_input_items_default_order_is_newest_first(client: OpenAI, http: httpx2.Client) -> None:
    created = client.responses.create(
        model=MODEL, background=True,
        input=[{"role": "user", "content": "first"}, {"role": "user", "content": "second"}],
    )
    body = http.get(f"/v1/responses/{created.id}/input_items").json()
    assert body["object"] == "list" and body["has_more"] is False
    assert [item["content"][0]["text"] for item in body["data"]] == ["second", "first"]
    assert (body["first_id"], body["last_id"]) == (body["data"][0]["id"], body["data"][-1]["id"])


def test_list_input_items_string_input_is_one_user_message(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="just text", background=True)
    [item] = client.responses.input_items.list(created.id).data
    assert (item.type, item.role, item.content[0].text) == ("message", "user", "just text")


def test_list_input_items_unknown_response_is_404(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_missing")


def test_delete_response_then_retrieve_is_404(client: OpenAI, http: httpx2.Client, api: ApiServer) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True)
    body = http.delete(f"/v1/responses/{created.id}").json()
    assert body == {"id": created.id, "object": "response", "deleted": True}
    assert api.db.run(get_response, created.id) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_delete_response_queued_drops_its_event_stream(client: OpenAI, redis: redis_lib.Redis) -> None:
    # No worker takes it: the DELETE cancels it while queued. Its opening events (instructions, tools,
    # metadata) stayed in Redis for the whole event TTL after the DELETE.
    created = client.responses.create(model=MODEL, input="hi", background=True, instructions="a secret prompt")
    client.responses.delete(created.id)
    [(_, fields)] = redis.xrange(redis_keys.events(created.id))
    assert fields == {b"end": b"cancelled", b"archived": b"-1"}
    assert redis.ttl(redis_keys.events(created.id)) > 0


def test_delete_response_with_sdk(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True)
    assert client.responses.delete(created.id) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(created.id)


def test_cancel_response_queued_is_cancelled_at_once(client: OpenAI, api: ApiServer, redis: redis_lib.Redis) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True)
    cancelled = client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    assert api.db.run(get_response, created.id).status == "cancelled"
    assert redis.get(redis_keys.cancel(created.id)) == b"1"
    entries = redis.xrange(redis_keys.events(created.id))
    assert entries[-1][1] == {b"end": b"cancelled"}
    assert [parse_frame(f[b"f"])["type"] for _, f in entries[:-1]] == ["response.created", "response.queued"]
    assert not redis.sismember(redis_keys.OPEN_STREAMS, created.id)  # listed while its end was on its way


def test_cancel_response_twice_is_idempotent(client: OpenAI, redis: redis_lib.Redis) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True)
    first = client.responses.cancel(created.id)
    second = client.responses.cancel(created.id)
    assert first.model_dump() == second.model_dump()
    assert sum(1 for _, f in redis.xrange(redis_keys.events(created.id)) if b"end" in f) == 1


def test_cancel_response_unknown_is_404(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_missing")
