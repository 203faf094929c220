"""What a response's end means on a worker beyond its save: its metric and its webhooks.

The deliveries are planned before the save that ends the response (:func:`planned_webhooks`) and logged
pending in its transaction (``ended_with_deliveries``); whoever won that save (the runner, or the reaper
failing a lost response: once per response) then calls :func:`response_ended`.
"""

from __future__ import annotations

from oss_responses.metrics import response_ended as count_ended
from oss_responses.webhooks.events import WebhookDelivery
from oss_responses.webhooks.notify import WebhookNotifier


def planned_webhooks(
    webhooks: WebhookNotifier | None, response_id: str, status: str, *, background: bool
) -> list[WebhookDelivery]:
    return [] if webhooks is None else webhooks.planned(response_id, status, background=background)


def response_ended(
    webhooks: WebhookNotifier | None, model: str, status: str, deliveries: list[WebhookDelivery]
) -> None:
    count_ended(model, status)
    if webhooks is not None and deliveries:
        webhooks.send(deliveries)
