"""The webhook events: their types, stable ids and payloads (OpenAI's ``openai.types.webhooks`` shapes)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import astuple, dataclass
from typing import Any

from oss_responses.config import Settings
from oss_responses.logs import safe_url

DELIVER_WEBHOOK_TASK = "oss_responses.deliver_webhook"

EVENT_TYPES: dict[str, str] = {
    "completed": "response.completed",
    "failed": "response.failed",
    "cancelled": "response.cancelled",
    "incomplete": "response.incomplete",
}


def event_id(response_id: str, event_type: str) -> str:
    """Derived, not random: whichever process queues the event (even twice) names it alike."""
    return "evt_" + hashlib.sha256(f"{response_id}:{event_type}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class WebhookDelivery:
    """One event for one endpoint; its fields are the task's arguments, so every retry sends the same body."""

    webhook_id: str
    event_type: str
    created_at: int  # when the response ended (Unix seconds)
    response_id: str
    url: str

    def payload(self) -> str:
        body: dict[str, Any] = {
            "id": self.webhook_id, "object": "event", "type": self.event_type, "created_at": self.created_at,
            "data": {"id": self.response_id},
        }
        return json.dumps(body, separators=(",", ":"))

    def task_args(self) -> list[Any]:
        return list(astuple(self))


def task_argsrepr(args: list[Any]) -> str:
    """A delivery task's arguments as Celery shows them (its ``argsrepr``, in its log lines, Flower and
    ``inspect``): the endpoint's URL without its userinfo, where a receiver's Basic credentials are."""
    return repr((*args[:-1], safe_url(args[-1])))


def planned_deliveries(
    settings: Settings, response_id: str, status: str, *, background: bool, ended_at: int
) -> list[WebhookDelivery]:
    """The deliveries a response's end calls for: none unless it ran in the background and ended."""
    event_type = EVENT_TYPES.get(status)
    if not background or event_type is None:
        return []
    webhook_id = event_id(response_id, event_type)
    return [
        WebhookDelivery(webhook_id, event_type, ended_at, response_id, endpoint.url)
        for endpoint in settings.webhook_endpoints
    ]
