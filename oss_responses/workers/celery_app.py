"""The Celery app: one task per response, on the model's queue (Redis broker).

Built by :func:`make_celery` from settings, never at import time. ``celery -A
oss_responses.workers.celery_app worker`` finds ``app`` through the module's ``__getattr__``, which
builds it from :func:`get_settings` on first access.

Delivery: ``acks_late`` + ``task_reject_on_worker_lost`` + prefetch 1, so a task whose worker died is
redelivered (after the broker's visibility timeout); the response's lease and status make a
redelivered task a no-op when the response already ran or runs elsewhere. The pool is ``threads``:
vLLM cannot live in prefork children, and every task thread shares the one engine loop.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from oss_responses.broker import TRANSPORT
from oss_responses.config import Settings, get_settings
from oss_responses.engine.frontends import Frontend
from oss_responses.redis_pool import silent_peer_guards
from oss_responses.statuses import RUN_RESPONSE_TASK
from oss_responses.webhooks.events import DELIVER_WEBHOOK_TASK
from oss_responses.workers.consumer import CONSUMER, MAX_RETRIES
from oss_responses.workers.pool import POOL
from oss_responses.workers.tasks import dispatcher, register


def make_celery(settings: Settings, frontend: Frontend | None = None) -> Celery:
    """The worker's Celery app; ``frontend``: its engine is a client of a shared vLLM engine core."""
    queue = settings.queue_for(settings.worker_model)
    app = Celery("oss_responses", broker=settings.celery_broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_pool=POOL,
        worker_concurrency=settings.worker_concurrency,
        task_default_queue=queue,
        task_routes={
            RUN_RESPONSE_TASK: {"queue": queue},
            DELIVER_WEBHOOK_TASK: {"queue": settings.webhook_queue},
        },
        broker_transport=TRANSPORT,  # kombu's Redis transport, surviving a Redis restart (broker.py)
        broker_transport_options=broker_transport_options(settings),
        broker_connection_retry_on_startup=True,
        worker_consumer=CONSUMER,  # a lost broker tried again every second (consumer.py)
        broker_connection_max_retries=MAX_RETRIES,
        # Celery 6's default would cancel the running tasks at each broker reconnect: a response runs on
        # through a Redis blip (its lease and stream say whether it may), and its late ack is the broker's.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
    register(app, settings, frontend)
    return app


def broker_transport_options(settings: Settings) -> dict[str, Any]:
    """The consumer's Redis connections: the visibility timeout, and bounds on a broker gone silent (no
    RST: a lost NAT entry or load-balancer flow). Without a socket timeout the heartbeat's PUBLISH waited
    on such a connection for good, in the consumer's own thread: the worker looked alive and never took a
    task again (the network probe: 0 of 16 new tasks, 6 minutes after the cut). Timed out, it is a lost
    connection, and Celery's consumer connects again. kombu's BRPOP waits 1 s: 10 s leaves room."""
    return {"visibility_timeout": settings.visibility_timeout_seconds, "socket_connect_timeout": 5,
            "socket_timeout": 10, **silent_peer_guards()}


def enqueue(
    app: Celery, settings: Settings, response_id: str, model: str, secrets: dict[str, Any] | None = None
) -> None:
    """Send a response's task to its model's queue (what the API does, by task name)."""
    dispatcher(app, settings)(response_id, model, secrets)


_app: Celery | None = None


def __getattr__(name: str) -> Celery:
    # ``celery -A oss_responses.workers.celery_app`` looks up ``app`` (then ``celery``) here.
    global _app
    if name in ("app", "celery"):
        if _app is None:
            _app = make_celery(get_settings())
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
