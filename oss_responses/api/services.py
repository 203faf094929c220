"""What the API's routes use, opened once per process by the app's lifespan."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import anyio
from celery import Celery
from redis.asyncio import Redis

from oss_responses.api.heartbeat import Heartbeat
from oss_responses.api.metrics import MetricsExporter
from oss_responses.api.stream_slots import StreamSlots
from oss_responses.broker import TRANSPORT, queues_url
from oss_responses.config import Settings
from oss_responses.eventlog.hub import EventHub
from oss_responses.prompt_tokenizer import PromptTokenizer
from oss_responses.redis_pool import PatientPool, silent_peer_guards
from oss_responses.sealing import Sealer
from oss_responses.storage import AsyncDatabase
from oss_responses.task_messages import run_response_message, task_mark
from oss_responses.webhooks.events import DELIVER_WEBHOOK_TASK, WebhookDelivery, task_argsrepr

log = logging.getLogger(__name__)

# redis-py's pools refuse a 101st connection at once (MaxConnectionsError): a burst of 200 concurrent
# POSTs answered half of them 503. Each command holds a connection for a round trip, so a bounded pool
# that waits serves any burst; a wait this long means Redis is in trouble, and the request gets its 503.
REDIS_CONNECTIONS = 100
REDIS_POOL_WAIT_SECONDS = 10.0
REDIS_CONNECT_TIMEOUT_SECONDS = 2.0


def api_redis(url: str) -> Redis:
    """An asyncio Redis client for one API process: its pool waits for a free connection, never refuses."""
    pool = PatientPool.from_url(url, max_connections=REDIS_CONNECTIONS, timeout=REDIS_POOL_WAIT_SECONDS,
                                socket_connect_timeout=REDIS_CONNECT_TIMEOUT_SECONDS)
    return Redis(connection_pool=pool)


# Removes the first task of a queue's list (from its newest, where a task just sent is) that holds ARGV[1]; a
# page at a time, so that a task found early costs no copy of the whole list. 1 if one was removed.
_WITHDRAW_SCRIPT = """
local length = redis.call('LLEN', KEYS[1])
for start = 0, length - 1, 128 do
  for _, message in ipairs(redis.call('LRANGE', KEYS[1], start, start + 127)) do
    if string.find(message, ARGV[1], 1, true) then
      return redis.call('LREM', KEYS[1], 1, message)
    end
  end
end
return 0
"""


class TaskQueue:
    """Celery, as a producer only: tasks are sent by name, so no worker code is imported here."""

    def __init__(self, broker_url: str, webhook_queue: str = "webhooks") -> None:
        self._webhook_queue = webhook_queue
        self._celery = Celery("oss_responses.api", broker=broker_url, set_as_current=False)
        # Celery's Redis transport keeps a queue's waiting tasks in a list named after the queue, in the Redis
        # Celery itself would send to.
        self.broker_url = queues_url(self._celery)
        self._broker = api_redis(self.broker_url)
        self._withdraw = self._broker.register_script(_WITHDRAW_SCRIPT)
        self._celery.conf.update(
            broker_transport=TRANSPORT,  # kombu's Redis transport, publishing without a client per task
            task_serializer="json", accept_content=["json"], broker_connection_retry_on_startup=True,
            # With Redis down, a POST answers 503 within a few seconds instead of retrying for long.
            task_publish_retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
            broker_transport_options={"socket_connect_timeout": 2, "socket_timeout": 5, **silent_peer_guards()},
        )

    async def warm(self, queues: Iterable[str]) -> None:
        """Do now, while the API starts, what its first task would otherwise do during a request: Celery
        builds its result backend (a scan of installed entry points), its task sender and its first task
        message, kombu its producer and broker connection (a webhook's task goes through ``send_task``),
        and declares each queue (a Redis round trip, once per queue). Measured: the first accept of a fresh
        API spent 12.4 ms in ``send_task`` (later ones 0.5 ms). With Redis away here, that work waits for
        the first request instead."""
        try:
            await anyio.to_thread.run_sync(self._warm_producer, list(queues))
            await self._broker.ping()  # the queue-depth check's connection
        except Exception:
            log.warning("could not warm up the broker connection; the first request will connect", exc_info=True)

    def _warm_producer(self, queues: list[str]) -> None:
        self._celery.backend  # noqa: B018  (built on first access)
        self._celery.amqp.send_task_message  # noqa: B018  (a cached property)
        run_response_message(self._celery, "warm", "warm")  # builds no connection: Celery's amqp, its oid
        with self._celery.producer_or_acquire() as producer:
            for name in queues:
                producer.maybe_declare(self._celery.amqp.queues[name])

    async def run_response(self, response_id: str, queue: str) -> None:
        # The message kombu would push, pushed by the loop's own client: send_task blocks on its socket, and
        # the hop to a thread for it cost the accept more CPU than the message (task_messages.py). The task
        # names the response only: its MCP credentials are sealed in its row, not in the broker.
        await self._broker.lpush(queue, run_response_message(self._celery, queue, response_id))

    async def withdraw(self, queue: str, response_id: str) -> bool:
        """Take a response's task out of ``queue`` while no worker has it (its response was cancelled while
        queued): left there, it counted against the queue's limit until a worker came to skip it, and the
        tasks of responses cancelled at once (a streamed create whose client left) filled the queue for
        every owner. False if no worker-free task was found (a worker took it, and will skip it)."""
        return bool(await self._withdraw(keys=[queue], args=[task_mark(response_id)]))

    async def deliver_webhooks(self, deliveries: list[WebhookDelivery]) -> None:
        await anyio.to_thread.run_sync(self._send_webhooks, deliveries)

    def _send_webhooks(self, deliveries: list[WebhookDelivery]) -> None:
        queue = self._webhook_queue
        for delivery in deliveries:
            args = delivery.task_args()
            self._celery.send_task(DELIVER_WEBHOOK_TASK, args=args, argsrepr=task_argsrepr(args), queue=queue,
                                   routing_key=queue)

    async def ping(self) -> None:
        """The broker answers (the Redis that holds the queues: ``OSS_RESPONSES_BROKER_URL``, or Redis)."""
        await self._broker.ping()

    async def waiting(self, queue: str) -> int:
        """Tasks waiting in ``queue`` (not those a worker holds unacknowledged)."""
        return int(await self._broker.llen(queue))

    async def aclose(self) -> None:
        self._celery.close()
        await self._broker.aclose()


@dataclass
class Services:
    settings: Settings
    db: AsyncDatabase
    redis: Redis
    hub: EventHub
    tasks: TaskQueue
    tokenizer: PromptTokenizer  # harmony, for counting input tokens; loaded at start-up
    metrics: MetricsExporter
    heartbeat: Heartbeat  # this process's liveness: its instance id relays the foreground responses it accepts
    sealer: Sealer | None = None  # None: no encryption keys configured
    streams: StreamSlots = field(default_factory=lambda: StreamSlots(0))  # per-owner open streams
