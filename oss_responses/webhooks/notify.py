"""Queueing a response's webhooks once it ended: each delivery is logged pending in the transaction that
saves the terminal status (``storage.webhook_deliveries.ended_with_deliveries``: the save decides who ended
it, exactly one caller per response), then its task is sent. Failing to send never fails the response: it
is logged, and the delivery stays ``pending`` for the sweeper.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from oss_responses.config import Settings
from oss_responses.storage.webhook_deliveries import DeliveryRow
from oss_responses.webhooks.events import WebhookDelivery, planned_deliveries

log = logging.getLogger(__name__)

# (task args) → the deliver_webhook task sent to the webhook queue.
SendDelivery = Callable[[list[Any]], None]


def log_rows(deliveries: list[WebhookDelivery]) -> list[DeliveryRow]:
    return [(d.webhook_id, d.url, d.event_type, d.response_id, datetime.fromtimestamp(d.created_at, UTC))
            for d in deliveries]


class WebhookNotifier:
    """The worker side (task threads, the reaper thread): a sync Celery send."""

    def __init__(self, settings: Settings, send: SendDelivery) -> None:
        self._settings = settings
        self._send = send

    def planned(self, response_id: str, status: str, *, background: bool) -> list[WebhookDelivery]:
        """The deliveries ending the response with ``status`` calls for: logged pending with the save that
        ends it (``ended_with_deliveries``), sent once it is saved (:meth:`send`)."""
        return planned_deliveries(self._settings, response_id, status, background=background, ended_at=int(time.time()))

    def send(self, deliveries: list[WebhookDelivery]) -> None:
        try:
            for delivery in deliveries:
                self._send(delivery.task_args())
        except Exception:  # the response is ended and saved; its deliveries stay pending for the sweeper
            log.exception("queueing the webhooks of %s failed", deliveries[0].response_id)
