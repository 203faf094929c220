"""The webhook sweeper sends again a delivery whose task was lost, with the same event (id and body)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis as redis_lib
from sqlalchemy import update
from support.clocks import ON_POSTGRESQL_ONLY

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.storage import Database, utcnow
from oss_responses.storage.models import WebhookDeliveryRow
from oss_responses.storage.webhook_deliveries import add_pending, record_attempt
from oss_responses.webhooks import sweeper as sweeper_module
from oss_responses.webhooks.events import WebhookDelivery
from oss_responses.webhooks.notify import log_rows
from oss_responses.webhooks.sweeper import WebhookSweeper

URL = "https://hooks.example/receive"
EVENT = WebhookDelivery("evt_lost", "response.completed", 1_764_000_000, "resp_lost", URL)


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    yield database
    database.dispose()


def _age(db: Database, webhook_id: str, seconds: float) -> None:
    with db.session() as session:
        session.execute(update(WebhookDeliveryRow).where(WebhookDeliveryRow.webhook_id == webhook_id)
                        .values(updated_at=utcnow() - timedelta(seconds=seconds)))


def _sweeper(db: Database, redis: redis_lib.Redis, sent: list[list[Any]]) -> WebhookSweeper:
    return WebhookSweeper(Settings(webhook_resend_after_seconds=60), db, redis, sent.append)


def test_sweep_sends_stale_pending_delivery_again_with_same_event(db: Database, redis: redis_lib.Redis) -> None:
    db.run(add_pending, log_rows([EVENT]))
    _age(db, "evt_lost", 120)
    sent: list[list[Any]] = []
    assert _sweeper(db, redis, sent).sweep_once() == 1
    assert sent == [EVENT.task_args()]
    assert WebhookDelivery(*sent[0]).payload() == EVENT.payload()


@pytest.mark.parametrize("overwritten", ["list", "string"])
def test_sweep_takes_its_lock_key_overwritten_without_expiry(
    db: Database, redis: redis_lib.Redis, overwritten: str
) -> None:
    # A lock key with no expiry (by hand, another application, a bug): SET NX found it every pass, and no
    # worker swept again, silently; lost webhooks were never sent again.
    if overwritten == "list":
        redis.rpush(redis_keys.WEBHOOK_SWEEP_LOCK, "x")
    else:
        redis.set(redis_keys.WEBHOOK_SWEEP_LOCK, "x")
    db.run(add_pending, log_rows([EVENT]))
    _age(db, "evt_lost", 120)
    sent: list[list[Any]] = []
    assert _sweeper(db, redis, sent).sweep_once() == 1 and sent == [EVENT.task_args()]
    assert not redis.exists(redis_keys.WEBHOOK_SWEEP_LOCK)  # released, as any pass releases it


def test_sweep_leaves_swept_delivery_alone_until_stale_again(db: Database, redis: redis_lib.Redis) -> None:
    db.run(add_pending, log_rows([EVENT]))
    _age(db, "evt_lost", 120)
    sent: list[list[Any]] = []
    sweeper = _sweeper(db, redis, sent)
    sweeper.sweep_once()
    assert sweeper.sweep_once() == 0 and len(sent) == 1


def test_sweep_leaves_recent_and_finished_deliveries_alone(db: Database, redis: redis_lib.Redis) -> None:
    delivered = WebhookDelivery("evt_done", "response.failed", 1, "resp_done", URL)
    retrying = WebhookDelivery("evt_retry", "response.failed", 1, "resp_retry", URL)
    db.run(add_pending, log_rows([EVENT, delivered, retrying]))
    db.run(record_attempt, "evt_done", URL, state="delivered", status=200, error=None)
    db.run(record_attempt, "evt_retry", URL, state="retrying", status=500, error="HTTP 500")
    _age(db, "evt_done", 120)
    _age(db, "evt_retry", 120)  # its next attempt may be up to an hour away: not lost yet
    sent: list[list[Any]] = []
    assert _sweeper(db, redis, sent).sweep_once() == 0


@ON_POSTGRESQL_ONLY
def test_sweep_leaves_recent_delivery_alone_when_its_clock_runs_ahead(
    database_url: str, db: Database, redis: redis_lib.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweeper's lock elects any worker: one whose clock ran past ``webhook_resend_after_seconds`` took
    every delivery just logged (by another host's clock) for a lost one and sent it twice."""
    monkeypatch.setattr(sweeper_module, "utcnow", lambda: utcnow() + timedelta(minutes=11), raising=False)
    db.run(add_pending, log_rows([EVENT]))
    sent: list[list[Any]] = []
    assert _sweeper(db, redis, sent).sweep_once() == 0 and sent == []


def test_sweeper_running_while_database_is_away_logs_outage_once_without_traceback(
    redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # It logged "webhook sweep failed" with a traceback at every pass for as long as the database was away.
    unreachable_db = Database("postgresql+psycopg://u@127.0.0.1:1/none")  # nothing listens there
    sweeping = _sweeper(unreachable_db, redis, [])
    sweeping.interval = 0.02
    with caplog.at_level("WARNING"):
        sweeping.start()
        time.sleep(0.5)  # some 20 passes
        sweeping.stop()
    unreachable_db.dispose()
    assert [r for r in caplog.records if r.exc_info] == []
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert line.startswith("the database unreachable (OperationalError: ")
