"""A response's task message: what Celery sends (workers) and what the API pushes itself are one message,
and kombu delivers it as Celery's task."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import redis as redis_lib
from celery import Celery
from kombu import Connection, Consumer, Queue

from oss_responses.api.services import TaskQueue
from oss_responses.broker import TRANSPORT
from oss_responses.statuses import RUN_RESPONSE_TASK
from oss_responses.task_messages import run_response_message, send_run_response

# What differs between two messages of the same task: each gets its own ids.
PER_MESSAGE = {("headers", "id"), ("headers", "root_id"), ("properties", "correlation_id"),
               ("properties", "delivery_tag")}


@pytest.fixture
def app(redis_url: str) -> Iterator[Celery]:
    app = Celery("test", broker=redis_url, set_as_current=False)
    app.conf.update(broker_transport=TRANSPORT, task_serializer="json", accept_content=["json"])
    yield app
    app.close()


def _published(redis: redis_lib.Redis, queue: str) -> tuple[dict[str, Any], list[Any]]:
    message = json.loads(redis.lpop(queue) or b"null")
    return message["headers"], json.loads(base64.b64decode(message["body"]))


def _without_ids(message: dict[str, Any]) -> dict[str, Any]:
    return {part: {key: value for key, value in fields.items() if (part, key) not in PER_MESSAGE}
            if isinstance(fields, dict) else fields for part, fields in message.items()}


def test_send_run_response_keeps_secrets_out_of_the_headers(app: Celery, redis: redis_lib.Redis) -> None:
    secrets = {"mcp_server": {"authorization": "Bearer s3cret"}}
    send_run_response(app, "responses.secret", "resp_1", secrets)
    headers, (args, kwargs, _) = _published(redis, "responses.secret")
    assert headers["task"] == RUN_RESPONSE_TASK
    assert args == ["resp_1", secrets] and kwargs == {}
    assert "s3cret" not in json.dumps(headers)
    assert headers["argsrepr"] == "('resp_1', {<secrets>})"


def test_send_run_response_reaches_a_queue_nobody_declared(app: Celery, redis: redis_lib.Redis) -> None:
    send_run_response(app, "responses.undeclared", "resp_2")
    assert not redis.exists("_kombu.binding.responses.undeclared")
    headers, (args, _, _) = _published(redis, "responses.undeclared")
    assert args == ["resp_2", {}] and headers["argsrepr"] == "('resp_2', {})"


def test_run_response_message_is_the_message_send_task_pushes(app: Celery, redis: redis_lib.Redis) -> None:
    send_run_response(app, "responses.same", "resp_3")
    sent = json.loads(redis.lpop("responses.same") or b"null")
    built = json.loads(run_response_message(app, "responses.same", "resp_3"))
    assert _without_ids(built) == _without_ids(sent)
    assert built["headers"]["id"] == built["headers"]["root_id"] == built["properties"]["correlation_id"]
    assert built["headers"]["id"] != sent["headers"]["id"]
    assert built["properties"]["delivery_tag"] != sent["properties"]["delivery_tag"]


def test_task_queue_run_response_pushes_a_task_kombu_delivers_to_celery(redis_url: str) -> None:
    tasks = TaskQueue(redis_url)
    try:
        anyio.run(tasks.run_response, "resp_4", "responses.pushed")
    finally:
        anyio.run(tasks.aclose)
    delivered: list[tuple[dict[str, Any], Any]] = []
    with Connection(redis_url, transport=TRANSPORT) as connection, \
            Consumer(connection.channel(), [Queue("responses.pushed")], accept=["json"], no_ack=True,
                     callbacks=[lambda body, message: delivered.append((message.headers, body))]):
        connection.drain_events(timeout=5)
    [(headers, (args, kwargs, _))] = delivered
    assert headers["task"] == RUN_RESPONSE_TASK and headers["argsrepr"] == "('resp_4', {})"
    assert args == ["resp_4", {}] and kwargs == {}


def test_task_queue_pushes_where_celery_sends_when_celery_broker_url_is_set(
    redis_url: str, redis: redis_lib.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery takes ``CELERY_BROKER_URL`` before the broker an app is built with, and so did the workers'
    consumer: the API's own push went to the configured Redis, where no worker read it."""
    celery_broker_url = redis_url.rsplit("/", 1)[0] + "/5"  # the same server, another database
    elsewhere = redis_lib.Redis.from_url(celery_broker_url)
    monkeypatch.setenv("CELERY_BROKER_URL", celery_broker_url)
    tasks = TaskQueue(redis_url)

    async def pushed() -> int:
        await tasks.run_response("resp_5", "responses.env")
        return await tasks.waiting("responses.env")

    try:
        assert anyio.run(pushed) == 1
    finally:
        anyio.run(tasks.aclose)
    assert (redis.llen("responses.env"), elsewhere.llen("responses.env")) == (0, 1)
    elsewhere.flushdb()
