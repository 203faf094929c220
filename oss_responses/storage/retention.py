"""Stored responses deleted once they are older than the deployment keeps them
(``OSS_RESPONSES_RESPONSE_RETENTION_SECONDS``; OpenAI keeps a response 30 days).

A purged response goes as a DELETE takes it: its row, its input and output items and its archived event
log (their foreign keys cascade), and the later turns that continued it keep their rows, their link
cleared, so continuing one is the 400 a deleted turn gives. Its webhook deliveries go with it. A DELETE keeps
them (they log what was sent): those go once they are as old, by their own ``created_at`` (the response's end),
or the deliveries of every deleted response would stay for good."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from oss_responses.statuses import TERMINAL_STATUSES
from oss_responses.storage.models import ResponseRow, WebhookDeliveryRow
from oss_responses.storage.records import database_now


def purge_responses_created_before(session: Session, cutoff: datetime, *, limit: int = 500) -> int:
    """Delete up to ``limit`` of the oldest ended responses created before ``cutoff``; how many went.
    One queued or in progress waits until it ends."""
    expired = (
        select(ResponseRow.id)
        .where(ResponseRow.created_at < cutoff, ResponseRow.status.in_(TERMINAL_STATUSES))
        .order_by(ResponseRow.created_at)
        .limit(limit)
    )
    ids = list(session.execute(expired).scalars())
    if ids:
        session.execute(delete(WebhookDeliveryRow).where(WebhookDeliveryRow.response_id.in_(ids)))
        session.execute(delete(ResponseRow).where(ResponseRow.id.in_(ids)))
    return len(ids)


def purge_responses_older_than(session: Session, age: timedelta, *, limit: int = 500) -> int:
    """``purge_responses_created_before`` the database's now less ``age`` (not the caller's clock)."""
    return purge_responses_created_before(session, database_now(session) - age, limit=limit)


def purge_delivery_log_created_before(session: Session, cutoff: datetime, *, limit: int = 500) -> int:
    """Delete up to ``limit`` of the oldest webhook deliveries logged before ``cutoff``; how many went. A
    delivery is logged when its response ended, so its response, if not deleted already, is as old and ended:
    it goes with the responses' purge anyway."""
    expired = (
        select(WebhookDeliveryRow.id)
        .where(WebhookDeliveryRow.created_at < cutoff)
        .order_by(WebhookDeliveryRow.created_at)
        .limit(limit)
    )
    ids = list(session.execute(expired).scalars())
    if ids:
        session.execute(delete(WebhookDeliveryRow).where(WebhookDeliveryRow.id.in_(ids)))
    return len(ids)


def purge_delivery_log_older_than(session: Session, age: timedelta, *, limit: int = 500) -> int:
    """``purge_delivery_log_created_before`` the database's now less ``age``."""
    return purge_delivery_log_created_before(session, database_now(session) - age, limit=limit)
