"""Queueing a response's webhooks once it ended: log each delivery as pending, then send its task.

Called after the terminal status is saved (the save decides who ended it: exactly one caller gets
here per response). Failing to queue never fails the response: it is logged, and the delivery stays
``pending`` in the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from oss_responses.config import Settings
from oss_responses.storage import Database
from oss_responses.storage.webhook_deliveries import add_pending
from oss_responses.webhooks.events import WebhookDelivery, planned_deliveries

log = logging.getLogger(__name__)

# (task args) → the deliver_webhook task sent to the webhook queue.
SendDelivery = Callable[[list[Any]], None]


def log_rows(deliveries: list[WebhookDelivery]) -> list[tuple[str, str, str, str, datetime]]:
    return [(d.webhook_id, d.url, d.event_type, d.response_id, datetime.fromtimestamp(d.created_at, UTC))
            for d in deliveries]


class WebhookNotifier:
    """The worker side (task threads, the reaper thread): sync SQL and a sync Celery send."""

    def __init__(self, settings: Settings, db: Database, send: SendDelivery) -> None:
        self._settings = settings
        self._db = db
        self._send = send

    def response_ended(self, response_id: str, status: str, *, background: bool) -> None:
        deliveries = planned_deliveries(
            self._settings, response_id, status, background=background, ended_at=int(time.time())
        )
        if not deliveries:
            return
        try:
            self._db.run(add_pending, log_rows(deliveries))
            for delivery in deliveries:
                self._send(delivery.task_args())
        except Exception:  # the response is ended and saved; its webhooks must not undo that
            log.exception("queueing the webhooks of %s failed", response_id)
