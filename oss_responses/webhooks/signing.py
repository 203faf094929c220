"""Standard Webhooks signatures (``webhook-id``, ``webhook-timestamp``, ``webhook-signature``), as OpenAI signs
its webhooks: the openai SDK's ``client.webhooks.unwrap(body, headers, secret=...)`` verifies them."""

from __future__ import annotations

from datetime import UTC, datetime

from standardwebhooks import Webhook


def signed_headers(secret: str, webhook_id: str, payload: str, now: datetime | None = None) -> dict[str, str]:
    """The headers of one attempt: signed at its own time (receivers refuse ones older than 5 minutes)."""
    now = now or datetime.now(UTC)
    return {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(webhook_id, now, payload),
    }
