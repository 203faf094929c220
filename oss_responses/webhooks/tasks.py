"""The Celery task delivering one webhook (``oss_responses.deliver_webhook``, on ``webhook_queue``).

A failed attempt raises Celery's ``Retry``: the same task, with the same arguments (so the same
``webhook-id`` and body), is sent again with a countdown; the message of the attempt is acknowledged
only once that is done (``acks_late``), so a worker lost mid-attempt leaves it to be redelivered. A copy
of a delivery that already ended (delivered or given up: a redelivered or resent task) does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery, Task
from celery.exceptions import Reject

from oss_responses.config import Settings
from oss_responses.logs import log_context
from oss_responses.storage import Database
from oss_responses.webhooks.delivery import attempt_delivery, backoff_seconds
from oss_responses.webhooks.events import DELIVER_WEBHOOK_TASK, WebhookDelivery, task_argsrepr


def register_webhook_task(app: Celery, settings: Settings, database: Callable[[], Database]) -> None:
    """``database``: the worker's database handle, once the worker has started."""

    def deliver_webhook(self: Task, *args: Any) -> str:
        delivery = WebhookDelivery(*args)
        with log_context(response_id=delivery.response_id):
            state, attempt_number = attempt_delivery(settings, database(), delivery)
        if state == "retrying":
            raise _retry(self, backoff_seconds(settings, attempt_number))
        return state

    # shared=False: the task is this app's alone (Celery's default hands it to every app made later in the
    # process, where another app's closure then met it: "already registered to a different callable").
    app.task(name=DELIVER_WEBHOOK_TASK, bind=True, acks_late=True, ignore_result=True, shared=False)(deliver_webhook)


def _retry(task: Task, countdown: float) -> Exception:
    """The retry to raise. Celery rejects a task whose retry it could not send (its broker is away) without
    putting it back, and the delivery stayed ``retrying`` with no task until the sweeper's resend; put back
    instead (or, the connection gone, left unacknowledged: redelivered after the visibility timeout)."""
    try:
        retry: Exception = task.retry(countdown=countdown, max_retries=None, throw=False,
                                      argsrepr=task_argsrepr(list(task.request.args)))
    except Reject as rejected:
        requeued: Exception = Reject(rejected.reason, requeue=True)
        return requeued
    return retry
