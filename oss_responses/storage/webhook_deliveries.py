"""Data access for ``webhook_deliveries``, the webhook delivery log (sync functions taking a ``Session``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import RowMapping, select, update
from sqlalchemy.orm import Session

from oss_responses.storage.models import WebhookDeliveryRow
from oss_responses.storage.records import database_now, utcnow

_deliveries = WebhookDeliveryRow.__table__
_FAILED_STATES = ("retrying", "failed")
# A delivery as logged: (webhook id, endpoint url, event type, response id, the event's created_at).
DeliveryRow = tuple[str, str, str, str, datetime]
ENDED_STATES = ("delivered", "failed")


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


def add_pending(session: Session, deliveries: Sequence[DeliveryRow]) -> None:
    """Log deliveries about to be queued: (webhook id, endpoint url, event type, response id, the event's
    ``created_at``) each; that time is the row's ``created_at``, so a delivery sent again has the same body.

    One already logged (the same event queued again) is left as it is.
    """
    now = utcnow()
    for webhook_id, url, event_type, response_id, created_at in deliveries:
        if _find(session, webhook_id, url) is None:
            session.add(WebhookDeliveryRow(
                webhook_id=webhook_id, endpoint_url=url, event_type=event_type, response_id=response_id,
                state="pending", attempts=0, created_at=created_at, updated_at=now,
            ))


def ended_with_deliveries(
    session: Session,
    deliveries: Sequence[DeliveryRow],
    end: Callable[..., bool],
    /,
    *args: Any,
    **kwargs: Any,
) -> bool:
    """``end(session, *args, **kwargs)``, a save that ends a response, and, if it did, the webhook deliveries
    its end calls for logged pending in the same transaction: a process that dies right after the save
    still leaves them to the sweeper (logged after it, they were lost with the process)."""
    ended = end(session, *args, **kwargs)
    if ended and deliveries:
        add_pending(session, deliveries)
    return ended


def delivery_state(session: Session, webhook_id: str, url: str) -> tuple[str, int] | None:
    """A delivery's state and the attempts made so far (None for a delivery not logged)."""
    query = select(_deliveries.c.state, _deliveries.c.attempts).where(
        _deliveries.c.webhook_id == webhook_id, _deliveries.c.endpoint_url == url
    )
    row = session.execute(query).one_or_none()
    return None if row is None else (row.state, int(row.attempts))


def claim_stale(
    session: Session, *, pending_for: timedelta, retrying_for: timedelta, limit: int = 100
) -> list[DeliveryRecord]:
    """Deliveries whose task seems lost (pending, or retrying, untouched for these long by the database's
    clock); each one's ``updated_at`` is set to now, so that the next sweep leaves it alone for as long again."""
    now = database_now(session)
    pending_before, retrying_before = now - pending_for, now - retrying_for
    stale = (
        (_deliveries.c.state == "pending") & (_deliveries.c.updated_at < pending_before)
    ) | ((_deliveries.c.state == "retrying") & (_deliveries.c.updated_at < retrying_before))
    query = select(_deliveries).where(stale).order_by(_deliveries.c.id).limit(limit)
    rows = list(session.execute(query).mappings())
    if rows:
        row = WebhookDeliveryRow
        session.execute(update(row).where(row.id.in_([r["id"] for r in rows])).values(updated_at=now))
    return _records(rows)


def record_attempt(
    session: Session, webhook_id: str, url: str, *, state: str, status: int | None, error: str | None
) -> None:
    """One attempt's result: ``state`` is ``delivered``, ``retrying`` or ``failed``. A delivered one stays
    delivered: a copy of its task that failed at the same time (at least once) does not undo it."""
    now = utcnow()
    row = WebhookDeliveryRow
    matches = (row.webhook_id == webhook_id) & (row.endpoint_url == url)
    if state != "delivered":
        matches &= row.state != "delivered"
    session.execute(
        update(row)
        .where(matches)
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
    return _records(session.execute(query).mappings())


def _records(rows: Iterable[RowMapping]) -> list[DeliveryRecord]:
    fields = DeliveryRecord.__dataclass_fields__
    return [DeliveryRecord(**{name: row[name] for name in fields}) for row in rows]


def _find(session: Session, webhook_id: str, url: str) -> int | None:
    query = select(_deliveries.c.id).where(_deliveries.c.webhook_id == webhook_id, _deliveries.c.endpoint_url == url)
    return session.execute(query).scalar_one_or_none()
