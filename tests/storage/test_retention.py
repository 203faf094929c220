"""Stored responses deleted once older than the deployment keeps them (``storage/retention.py``)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select

from oss_responses.storage import Database, delete_response, get_response, insert_response, save_event_log, utcnow
from oss_responses.storage.models import EventLogRow, WebhookDeliveryRow
from oss_responses.storage.retention import purge_delivery_log_created_before, purge_responses_created_before
from oss_responses.storage.webhook_deliveries import add_pending
from tests.support.rows import new_response

DAY = timedelta(days=1)


def stored(db: Database, *, age: timedelta, status: str = "completed", previous: str | None = None) -> str:
    record = new_response(previous, status=status, created_at=utcnow() - age)
    db.run(insert_response, record, [])
    return record.id


def test_purge_deletes_ended_responses_created_before_cutoff_with_their_logs(db: Database) -> None:
    old, fresh = stored(db, age=31 * DAY), stored(db, age=DAY)
    db.run(save_event_log, old, 0, [b""], utcnow() + DAY)
    db.run(add_pending, [("wh_1", "http://hook", "response.completed", old, utcnow())])

    assert db.run(purge_responses_created_before, utcnow() - 30 * DAY) == 1

    assert db.run(get_response, old) is None and db.run(get_response, fresh) is not None
    left = db.run(lambda session: (session.scalar(select(func.count()).select_from(EventLogRow)),
                                   session.scalar(select(func.count()).select_from(WebhookDeliveryRow))))
    assert left == (0, 0)


def test_purge_leaves_old_response_still_running_until_it_ends(db: Database) -> None:
    running = stored(db, age=31 * DAY, status="in_progress")
    assert db.run(purge_responses_created_before, utcnow() - 30 * DAY) == 0
    assert db.run(get_response, running) is not None


def test_purge_clears_link_of_later_turn_as_delete_does(db: Database) -> None:
    first = stored(db, age=31 * DAY)
    second = stored(db, age=DAY, previous=first)
    db.run(purge_responses_created_before, utcnow() - 30 * DAY)
    record = db.run(get_response, second)
    assert record is not None and record.previous_response_id is None


def test_purge_takes_oldest_first_up_to_its_limit(db: Database) -> None:
    ages = [40, 35, 32]
    ids = [stored(db, age=age * DAY) for age in ages]
    assert db.run(purge_responses_created_before, utcnow() - 30 * DAY, limit=2) == 2
    assert [db.run(get_response, rid) is None for rid in ids] == [True, True, False]


def test_purge_deletes_delivery_log_of_response_deleted_before_cutoff(db: Database) -> None:
    """A DELETE keeps a response's webhook deliveries (they log what was sent), and the purge took deliveries
    only with their response: those of a deleted response stayed for good, one row per endpoint and end, the
    table growing without bound under a retention meant to bound it."""
    deleted, kept = stored(db, age=31 * DAY), stored(db, age=DAY)
    db.run(add_pending, [("wh_1", "http://hook", "response.completed", deleted, utcnow() - 31 * DAY),
                         ("wh_2", "http://hook", "response.completed", kept, utcnow() - DAY)])
    db.run(delete_response, deleted)

    assert db.run(purge_delivery_log_created_before, utcnow() - 30 * DAY) == 1

    left = db.run(lambda session: list(session.scalars(select(WebhookDeliveryRow.response_id))))
    assert left == [kept]
