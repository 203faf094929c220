"""The service's kombu transport: a publishing channel keeps one Redis client."""

from __future__ import annotations

import anyio
import redis as redis_lib
from kombu import Connection

from oss_responses.api.services import TaskQueue
from oss_responses.broker import TRANSPORT


def test_channel_reuses_its_redis_client_for_commands(redis_url: str, redis: redis_lib.Redis) -> None:
    with Connection(redis_url, transport=TRANSPORT) as connection:
        channel = connection.default_channel
        assert channel._create_client() is channel._create_client()
        assert channel._create_client(asynchronous=True) is not channel._create_client()


def test_task_queue_publishes_tasks_through_service_transport(redis_url: str, redis: redis_lib.Redis) -> None:
    queue = TaskQueue(redis_url)
    try:
        for n in range(3):
            queue._send(f"resp_{n}", "responses.test")
    finally:
        queue._celery.close()
    assert redis.llen("responses.test") == 3


def test_task_queue_warm_declares_its_queues_before_any_task(redis_url: str, redis: redis_lib.Redis) -> None:
    queue = TaskQueue(redis_url)
    try:
        # Names no other test sent to: kombu remembers a process's bindings once made.
        anyio.run(queue.warm, ["responses.warmed", "webhooks.warmed"])
    finally:
        queue._celery.close()
    assert redis.exists("_kombu.binding.responses.warmed", "_kombu.binding.webhooks.warmed") == 2
    assert redis.llen("responses.warmed") == 0  # declared, nothing sent
