"""A background response cancelled while queued ends in the API: the API queues its ``response.cancelled``
webhook (the delivery logged as pending, its task on the webhooks queue for a worker to deliver), its stream
key overwritten or not."""

from __future__ import annotations

import base64
import json

import pytest
import redis as redis_lib
from openai import OpenAI
from support import MODEL
from support.api_server import ApiServer
from support.sdk import end_queued

from oss_responses import redis_keys
from oss_responses.config import Settings, WebhookEndpoint
from oss_responses.storage.webhook_deliveries import list_deliveries
from oss_responses.webhooks.events import DELIVER_WEBHOOK_TASK, event_id

URL = "https://hooks.example/receive"


@pytest.fixture
def settings(database_url: str, redis_url: str) -> Settings:
    endpoint = WebhookEndpoint(url=URL, secret="whsec_" + base64.b64encode(b"k" * 32).decode())
    return Settings(database_url=database_url, redis_url=redis_url, models=[MODEL], webhook_endpoints=[endpoint])


def _queued_tasks(redis: redis_lib.Redis, queue: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(message) for message in redis.lrange(redis_keys.broker_queue(queue), 0, -1)]


def test_cancel_queued_response_queues_cancelled_webhook(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis
) -> None:
    created = client.responses.create(model=MODEL, input="cancel me", background=True)
    client.responses.cancel(created.id)

    [task] = _queued_tasks(redis, "webhooks")
    assert task["headers"]["task"] == DELIVER_WEBHOOK_TASK
    args = json.loads(base64.b64decode(task["body"]))[0]
    webhook_id = event_id(created.id, "response.cancelled")
    assert args[:2] == [webhook_id, "response.cancelled"] and args[3:] == [created.id, URL]
    [record] = api.db.run(list_deliveries, response_id=created.id)
    assert (record.webhook_id, record.state, record.attempts) == (webhook_id, "pending", 0)


def test_cancel_twice_queues_one_webhook(client: OpenAI, api: ApiServer, redis: redis_lib.Redis) -> None:
    created = client.responses.create(model=MODEL, input="cancel me twice", background=True)
    client.responses.cancel(created.id)
    client.responses.cancel(created.id)
    assert len(_queued_tasks(redis, "webhooks")) == 1


@pytest.mark.parametrize("verb", ["cancel", "delete"])
def test_cancel_queued_response_with_overwritten_log_ends_it_with_webhook(
    client: OpenAI, api: ApiServer, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture, verb: str
) -> None:
    """Its stream key left holding a string (by hand, another application, a bug): the end marker's XADD is
    refused (WRONGTYPE). That was taken for Redis refusing writes, a 503 after SQL had cancelled it: DELETE
    deleted nothing and the webhook's task was not sent (left to the sweeper, ten minutes later)."""
    created = client.responses.create(model=MODEL, input="cancel me", background=True)
    key = redis_keys.events(created.id)
    redis.set(key, "not a stream")
    end_queued(client, api.db, created.id, verb)
    [task] = _queued_tasks(redis, "webhooks")
    assert json.loads(base64.b64decode(task["body"]))[0][1] == "response.cancelled"
    assert redis.get(key) == b"not a stream" and redis.ttl(key) > 0  # left as it is, expiring with the log
    assert not redis.sismember(redis_keys.OPEN_STREAMS, created.id)
    assert any(key in record.getMessage() and record.levelname == "WARNING" for record in caplog.records)
    assert not [record for record in caplog.records if record.exc_info]
