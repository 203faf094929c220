"""Data access for ``webhook_deliveries``, the webhook delivery log (sync functions taking a ``Session``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from oss_responses.storage.models import WebhookDeliveryRow
from oss_responses.storage.records import utcnow

_deliveries = WebhookDeliveryRow.__table__
_FAILED_STATES = ("retrying", "failed")


@dataclass(frozen=True)
class DeliveryRecord:
    webhook_id: str
    endpoint_url: str
    event_type: str
    response_id: str
    state: str
    attempts: int
    last_status: int | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    delivered_at: datetime | None


def add_pending(session: Session, deliveries: Sequence[tuple[str, str, str, str]]) -> None:
    """Log deliveries about to be queued: (webhook id, endpoint url, event type, response id) each.

    One already logged (the same event queued again) is left as it is.
    """
    now = utcnow()
    for webhook_id, url, event_type, response_id in deliveries:
        if _find(session, webhook_id, url) is None:
            session.add(WebhookDeliveryRow(
                webhook_id=webhook_id, endpoint_url=url, event_type=event_type, response_id=response_id,
                state="pending", attempts=0, created_at=now, updated_at=now,
            ))


def record_attempt(
    session: Session, webhook_id: str, url: str, *, state: str, status: int | None, error: str | None
) -> None:
    """One attempt's result: ``state`` is ``delivered``, ``retrying`` or ``failed``."""
    now = utcnow()
    row = WebhookDeliveryRow
    session.execute(
        update(row)
        .where(row.webhook_id == webhook_id, row.endpoint_url == url)
        .values(
            state=state, attempts=row.attempts + 1, last_status=status, last_error=error,
            updated_at=now, delivered_at=now if state == "delivered" else None,
        )
    )


def list_deliveries(
    session: Session, *, response_id: str | None = None, failed: bool = False, limit: int = 100
) -> list[DeliveryRecord]:
    """The newest deliveries first; ``failed``: only those whose last attempt failed."""
    query = select(_deliveries).order_by(_deliveries.c.id.desc()).limit(limit)
    if response_id is not None:
        query = query.where(_deliveries.c.response_id == response_id)
    if failed:
        query = query.where(_deliveries.c.state.in_(_FAILED_STATES))
    fields = DeliveryRecord.__dataclass_fields__
    return [DeliveryRecord(**{name: row[name] for name in fields}) for row in session.execute(query).mappings()]


def _find(session: Session, webhook_id: str, url: str) -> int | None:
    query = select(_deliveries.c.id).where(_deliveries.c.webhook_id == webhook_id, _deliveries.c.endpoint_url == url)
    return session.execute(query).scalar_one_or_none()
