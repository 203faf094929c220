"""Limits on what one request may ask for: each refusal in OpenAI's error shape, nothing stored."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import redis as redis_lib
from support import MODEL
from support.api_server import ApiServer

from oss_responses import redis_keys
from oss_responses.config import Settings

BODY_LIMIT = 4_096
QUEUE_LIMIT = 3


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={
        "max_body_bytes": BODY_LIMIT, "max_input_items": 5, "max_tools": 2,
        "max_output_tokens_ceiling": 1_000, "max_output_tokens_ceilings": {"gpt-oss-120b": 50},
        "max_queued_per_model": QUEUE_LIMIT, "queue_full_retry_after_seconds": 7,
    })


def _error(response: httpx2.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def _nothing_stored(api: ApiServer, redis: redis_lib.Redis, waiting: int = 0) -> None:
    from sqlalchemy import func, select

    from oss_responses.storage.models import ResponseRow

    with api.db.session() as session:
        assert session.scalar(select(func.count()).select_from(ResponseRow)) == 0
    assert list(redis.scan_iter(match=redis_keys.events("*"))) == []
    assert redis.llen(api.settings.queue_for(MODEL)) == waiting


def test_create_response_body_over_limit_is_413(http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis) -> None:
    error = _error(http.post("/v1/responses", json={"model": MODEL, "input": "x" * BODY_LIMIT}), 413)
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_too_large")
    _nothing_stored(api, redis)


def test_create_response_chunked_body_over_limit_is_413(
    http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis
) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while the body streams in
        yield b'{"model": "%s", "input": "' % MODEL.encode()
        for _ in range(64):
            yield b"x" * 1024
        yield b'"}'

    response = http.post("/v1/responses", content=chunks(), headers={"content-type": "application/json"})
    assert _error(response, 413)["code"] == "request_too_large"
    _nothing_stored(api, redis)


def test_create_response_body_under_limit_is_accepted(http: httpx2.Client) -> None:
    response = http.post("/v1/responses", json={"model": MODEL, "input": "x" * 3_000, "background": True})
    assert response.status_code == 200, response.text


def test_create_response_too_many_input_items_is_400(
    http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis
) -> None:
    items = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    error = _error(http.post("/v1/responses", json={"model": MODEL, "input": items}), 400)
    assert (error["param"], error["code"]) == ("input", "too_many_items")
    _nothing_stored(api, redis)


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/input_tokens", "/v1/responses/compact"])
def test_too_many_invalid_input_items_are_refused_by_their_number(
    http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis, path: str
) -> None:
    """Counted before their entries are validated: the error says how many, not the first one's missing field."""
    error = _error(http.post(path, json={"model": MODEL, "input": [{}] * 6}), 400)
    assert (error["param"], error["code"]) == ("input", "too_many_items")
    _nothing_stored(api, redis)


def test_create_response_too_many_tools_is_400(http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis) -> None:
    tools = [{"type": "function", "name": f"f{i}", "parameters": {"type": "object"}} for i in range(3)]
    error = _error(http.post("/v1/responses", json={"model": MODEL, "input": "hi", "tools": tools}), 400)
    assert (error["param"], error["code"]) == ("tools", "too_many_tools")
    _nothing_stored(api, redis)


@pytest.mark.parametrize(("model", "ceiling"), [(MODEL, 1_000), ("gpt-oss-120b", 50)])
def test_create_response_max_output_tokens_above_model_ceiling_is_400(
    http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis, model: str, ceiling: int
) -> None:
    body = {"model": model, "input": "hi", "max_output_tokens": ceiling + 1}
    error = _error(http.post("/v1/responses", json=body), 400)
    assert error["param"] == "max_output_tokens" and str(ceiling) in error["message"]
    _nothing_stored(api, redis)


def test_create_response_max_output_tokens_at_ceiling_is_accepted(http: httpx2.Client) -> None:
    body = {"model": MODEL, "input": "hi", "max_output_tokens": 1_000, "background": True}
    assert http.post("/v1/responses", json=body).status_code == 200


def test_create_response_full_queue_is_429_with_retry_after(
    http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis
) -> None:
    queue = api.settings.queue_for(MODEL)
    redis.rpush(queue, *[b"waiting task"] * QUEUE_LIMIT)  # tasks no worker has taken yet
    response = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True})
    error = _error(response, 429)
    assert response.headers["retry-after"] == "7"
    assert error["code"] == "queue_full" and f"{QUEUE_LIMIT} responses are ahead" in error["message"]
    _nothing_stored(api, redis, waiting=QUEUE_LIMIT)


def test_create_response_to_queue_whose_key_holds_something_else_is_503_saying_so(
    http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis
) -> None:
    redis.set(api.settings.queue_for(MODEL), "not a queue")  # by hand, another application, a bug
    error = _error(http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True}), 503)
    assert error["code"] == "queue_unavailable" and "holds something other than a list" in error["message"]
    with api.db.session() as session:
        from sqlalchemy import func, select

        from oss_responses.storage.models import ResponseRow
        assert session.scalar(select(func.count()).select_from(ResponseRow)) == 0


def test_create_response_filling_queue_to_its_limit_is_accepted(
    http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis
) -> None:
    redis.rpush(api.settings.queue_for(MODEL), *[b"waiting task"] * (QUEUE_LIMIT - 1))
    response = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True})
    assert response.status_code == 200, response.text
    assert redis.llen(api.settings.queue_for(MODEL)) == QUEUE_LIMIT


def test_create_response_full_queue_of_other_model_does_not_refuse(
    http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis
) -> None:
    redis.rpush(api.settings.queue_for("gpt-oss-120b"), *[b"waiting task"] * (QUEUE_LIMIT + 5))
    response = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True})
    assert response.status_code == 200, response.text


def test_create_response_after_responses_cancelled_while_queued_is_accepted(
    http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis
) -> None:
    """A response cancelled while queued takes its task out of its model's queue: the tasks of cancelled
    responses filled it (one owner's streams, each left at once, up to the limit), and every owner got 429
    ``queue_full`` while no response waited."""
    for _ in range(QUEUE_LIMIT):
        created = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True}).json()
        assert http.post(f"/v1/responses/{created['id']}/cancel").json()["status"] == "cancelled"
    assert redis.llen(api.settings.queue_for(MODEL)) == 0
    response = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True})
    assert response.status_code == 200, response.text
