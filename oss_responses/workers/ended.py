"""What follows a response's end on a worker, once its terminal status is saved: its metric and its webhooks.

Called by whoever won the save (the runner, or the reaper failing a lost response), so once per response.
"""

from __future__ import annotations

from oss_responses.metrics import response_ended as count_ended
from oss_responses.webhooks.notify import WebhookNotifier


def response_ended(
    webhooks: WebhookNotifier | None, response_id: str, model: str, status: str, *, background: bool
) -> None:
    count_ended(model, status)
    if webhooks is not None:
        webhooks.response_ended(response_id, status, background=background)
