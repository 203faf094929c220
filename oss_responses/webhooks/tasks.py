"""The Celery task delivering one webhook (``oss_responses.deliver_webhook``, on ``webhook_queue``).

A failed attempt raises Celery's ``Retry``: the same task, with the same arguments (so the same
``webhook-id`` and body), is sent again with a countdown; the message of the attempt is acknowledged
only once that is done (``acks_late``), so a worker lost mid-attempt leaves it to be redelivered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery, Task

from oss_responses.config import Settings
from oss_responses.logs import log_context
from oss_responses.storage import Database
from oss_responses.webhooks.delivery import attempt_delivery, backoff_seconds
from oss_responses.webhooks.events import DELIVER_WEBHOOK_TASK, WebhookDelivery


def register_webhook_task(app: Celery, settings: Settings, database: Callable[[], Database]) -> None:
    """``database``: the worker's database handle, once the worker has started."""

    def deliver_webhook(self: Task, *args: Any) -> str:
        delivery = WebhookDelivery(*args)
        with log_context(response_id=delivery.response_id):
            state, attempt_number = attempt_delivery(settings, database(), delivery)
        if state == "retrying":
            raise self.retry(countdown=backoff_seconds(settings, attempt_number), max_retries=None)
        return state

    app.task(name=DELIVER_WEBHOOK_TASK, bind=True, acks_late=True, ignore_result=True)(deliver_webhook)
