"""The reaper: responses whose worker is gone (no lease) are taken over (dispatched again) or, without a
dispatcher, failed with their streams ended; responses queued for too long have their task sent again."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta

import pytest
import redis as redis_lib
from sqlalchemy import select
from support.clocks import ON_POSTGRESQL_ONLY
from support.servers import start_postgres
from support.streams import assert_contiguous, events_of, is_closed
from support.workers import accept, overwrite_row

from oss_responses import redis_keys, relays
from oss_responses.config import Settings
from oss_responses.storage import (
    Database,
    EventLogRow,
    delete_response,
    get_event_log,
    get_response,
    migrate,
    save_event_log,
    transition,
    utcnow,
)
from oss_responses.storage.webhook_deliveries import add_pending, list_deliveries
from oss_responses.workers import reaper as reaper_module
from oss_responses.workers.reaper import HANDOFF, REAPER_LOCK, Reaper


def reaper(db: Database, redis: redis_lib.Redis, settings: Settings) -> Reaper:
    return Reaper(db, redis, worker_id="test", interval_seconds=0.5, lease_seconds=3, event_ttl_seconds=60)


def in_progress(db: Database, redis: redis_lib.Redis, settings: Settings) -> str:
    response_id = accept(db, redis, settings, input="hi", background=True)
    assert db.run(transition, response_id, from_statuses=("queued",), to_status="in_progress")
    return response_id


def test_reaper_fails_lost_response_and_closes_stream(db: Database, redis: redis_lib.Redis, settings: Settings) -> None:
    response_id = in_progress(db, redis, settings)
    assert reaper(db, redis, settings).reap_once() == [response_id]
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "failed"
    assert record.error is not None and "worker_lost" in record.error["message"]
    events = events_of(redis, response_id)
    assert_contiguous(events)
    assert events[-1]["type"] == "response.failed" and events[-1]["response"]["status"] == "failed"
    assert is_closed(redis, response_id)


def test_reaper_failing_response_whose_stream_redis_lost_marks_its_end_rewritten(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    """A follower of the lost stream is past the new one's ids: the mark has the API's hub tell it (an
    ``error`` event) rather than end its stream cleanly with no terminal event."""
    response_id = in_progress(db, redis, settings)
    redis.delete(redis_keys.events(response_id))  # FLUSHALL, an eviction
    assert reaper(db, redis, settings).reap_once() == [response_id]
    *_, (_, end) = redis.xrange(redis_keys.events(response_id))
    assert [event["type"] for event in events_of(redis, response_id)] == ["response.failed"]
    assert end == {b"end": b"failed", b"rewritten": b"1"}


def test_reaper_leaves_leased_response_running(db: Database, redis: redis_lib.Redis, settings: Settings) -> None:
    response_id = in_progress(db, redis, settings)
    redis.set(redis_keys.lease(response_id), "alive-worker", px=5000)
    assert reaper(db, redis, settings).reap_once() == []
    assert db.run(get_response, response_id).status == "in_progress"  # type: ignore[union-attr]
    assert not is_closed(redis, response_id)


def test_reaper_skips_pass_while_another_reaper_holds_lock(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = in_progress(db, redis, settings)
    redis.set(REAPER_LOCK, "another-reaper", px=5000)
    assert reaper(db, redis, settings).reap_once() == []
    assert db.run(get_response, response_id).status == "in_progress"  # type: ignore[union-attr]


def test_reaper_deletes_lost_response_when_store_is_false(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="hi", store=False)
    db.run(transition, response_id, from_statuses=("queued",), to_status="in_progress")
    assert reaper(db, redis, settings).reap_once() == [response_id]
    assert db.run(get_response, response_id) is None
    assert events_of(redis, response_id)[-1]["type"] == "response.failed"


def test_reaper_fails_lost_response_whose_stored_json_does_not_validate(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = in_progress(db, redis, settings)
    overwrite_row(db, response_id, response={"id": response_id, "tools": "broken"})
    assert reaper(db, redis, settings).reap_once() == [response_id]
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "failed"
    assert record.response["id"] == response_id and record.response["model"] == record.model
    events = events_of(redis, response_id)
    assert_contiguous(events)
    assert events[-1]["type"] == "response.failed" and is_closed(redis, response_id)


def dispatching_reaper(
    db: Database, redis: redis_lib.Redis, sent: list[tuple], *, event_ttl_seconds: int = 60  # type: ignore[type-arg]
) -> Reaper:
    return Reaper(db, redis, worker_id="test", interval_seconds=0.5, lease_seconds=3,
                  event_ttl_seconds=event_ttl_seconds,
                  dispatch=lambda response_id, model, secrets: sent.append((response_id, model)))


def test_reaper_dispatches_takeover_of_lost_response_once(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = in_progress(db, redis, settings)
    sent: list[tuple] = []  # type: ignore[type-arg]
    assert dispatching_reaper(db, redis, sent).reap_once() == [response_id]
    assert dispatching_reaper(db, redis, sent).reap_once() == []  # its takeover is queued already
    assert sent == [(response_id, "gpt-oss-20b")]
    assert db.run(get_response, response_id).status == "in_progress"  # type: ignore[union-attr]
    assert not is_closed(redis, response_id)


def test_running_reaper_tells_lost_response_in_one_warning(
    db: Database, redis: redis_lib.Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # The pass's own summary ("reaper handled 1 lost responses") was a second WARNING for the same loss.
    response_id = in_progress(db, redis, settings)
    sent: list[tuple] = []  # type: ignore[type-arg]
    reaping = dispatching_reaper(db, redis, sent)
    with caplog.at_level("INFO", logger="oss_responses.workers.reaper"):
        reaping.start()
        deadline = time.monotonic() + 10
        while not any("pass handled" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.05)
        reaping.stop()
    told = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "oss_responses.workers.reaper"]
    assert [message for level, message in told if level == "WARNING"] == [
        f"{response_id} lost its worker: dispatching its takeover"]
    assert [level for level, message in told if "pass handled 1 response" in message] == ["INFO"]
    assert sent == [(response_id, "gpt-oss-20b")]


def test_reaper_dispatches_no_takeover_of_leased_response(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = in_progress(db, redis, settings)
    redis.set(redis_keys.lease(response_id), "alive-worker", px=5000)
    sent: list[tuple] = []  # type: ignore[type-arg]
    assert dispatching_reaper(db, redis, sent).reap_once() == [] and sent == []


def test_reap_response_leased_again_since_the_survey_dispatches_nothing(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = in_progress(db, redis, settings)
    redis.set(redis_keys.lease(response_id), "its-takeover", px=5000)  # taken between the survey and the reap
    sent: list[tuple] = []  # type: ignore[type-arg]
    assert dispatching_reaper(db, redis, sent).reap(response_id) is False and sent == []


def test_reaper_sends_task_of_stale_queued_response_again_once(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    stale = accept(db, redis, settings, input="hi", background=True)  # its task was lost: never enqueued
    overwrite_row(db, stale, created_at=utcnow() - timedelta(hours=1))
    fresh = accept(db, redis, settings, input="hi", background=True)
    announce_worker(redis, "gpt-oss-20b")
    sent: list[tuple] = []  # type: ignore[type-arg]
    assert dispatching_reaper(db, redis, sent).reap_once() == [stale]
    assert dispatching_reaper(db, redis, sent).reap_once() == []
    assert sent == [(stale, "gpt-oss-20b")] and fresh not in {rid for rid, _ in sent}


def test_reaper_leaves_stale_queued_response_of_model_no_worker_serves(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    """Its task waits in a queue nobody consumes: a copy sent each period piled up there, counted against
    the model's queue limit, until a worker came and ran them all."""
    stale = accept(db, redis, settings, input="hi", background=True)
    overwrite_row(db, stale, created_at=utcnow() - timedelta(hours=1))
    announce_worker(redis, "another-model")
    sent: list[tuple] = []  # type: ignore[type-arg]
    assert dispatching_reaper(db, redis, sent).reap_once() == [] and sent == []
    announce_worker(redis, "gpt-oss-20b")  # a worker for it started: the task may have been lost
    assert dispatching_reaper(db, redis, sent).reap_once() == [stale]


def test_reaper_sends_task_of_stale_queued_response_again_beside_a_ready_key_holding_something_else(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    """A key named as a worker's announcement but holding a list (by hand, another application, a bug; no TTL):
    reading the announcements raised WRONGTYPE, which failed every pass's housekeeping (the stale sweep, the
    event logs' purge, retention) for as long as the key stayed."""
    stale = accept(db, redis, settings, input="hi", background=True)
    overwrite_row(db, stale, created_at=utcnow() - timedelta(hours=1))
    announce_worker(redis, "gpt-oss-20b")
    redis.rpush(redis_keys.worker_ready("not-a-worker"), "not an announcement")
    sent: list[tuple] = []  # type: ignore[type-arg]
    assert dispatching_reaper(db, redis, sent).reap_once() == [stale]
    assert sent == [(stale, "gpt-oss-20b")]


def announce_worker(redis: redis_lib.Redis, model: str) -> None:
    """What a worker's context keeps set while its engine is up (``workers/context.py``)."""
    redis.set(redis_keys.worker_ready(f"worker-of-{model}"), json.dumps({"model": model, "engine": "scripted"}))


def test_reaper_purges_event_logs_past_their_ttl(db: Database, redis: redis_lib.Redis, settings: Settings) -> None:
    expired, live = (accept(db, redis, settings, input="hi") for _ in range(2))
    db.run(save_event_log, expired, 0, [b"x"], utcnow() - timedelta(seconds=1))
    db.run(save_event_log, live, 0, [b"x"], utcnow() + timedelta(hours=1))

    reaper(db, redis, settings).reap_once()

    assert not has_row(db, expired) and db.run(get_event_log, live) is not None


def test_reaper_deletes_ended_responses_past_retention_in_batches(
    db: Database, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reaper_module, "RETENTION_BATCH", 2)  # 5 old responses: three batches in one pass
    old = [accept(db, redis, settings, input="hi") for _ in range(5)]
    for response_id in old:
        overwrite_row(db, response_id, status="completed", created_at=utcnow() - timedelta(days=31))
    fresh = accept(db, redis, settings, input="hi")
    overwrite_row(db, fresh, status="completed")
    keeping = Reaper(db, redis, worker_id="test", interval_seconds=0.5, lease_seconds=3, event_ttl_seconds=60,
                     retention_seconds=30 * 86_400)

    keeping.reap_once()

    assert [db.run(get_response, rid) for rid in old] == [None] * 5
    assert db.run(get_response, fresh) is not None


def test_reaper_deletes_delivery_log_of_deleted_response_past_retention(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    """A DELETE keeps the response's webhook deliveries (the log of what was sent); retention took deliveries
    only with their response, so those of every deleted response stayed for good."""
    deleted = accept(db, redis, settings, input="hi", background=True)
    overwrite_row(db, deleted, status="completed", created_at=utcnow() - timedelta(days=31))
    db.run(add_pending, [("wh_1", "http://hook", "response.completed", deleted, utcnow() - timedelta(days=31))])
    db.run(delete_response, deleted)
    keeping = Reaper(db, redis, worker_id="test", interval_seconds=0.5, lease_seconds=3, event_ttl_seconds=60,
                     retention_seconds=30 * 86_400)

    keeping.reap_once()

    assert db.run(list_deliveries, response_id=deleted) == []


def has_row(db: Database, response_id: str) -> bool:
    """Its event log is still in SQL (get_event_log answers None for an expired one either way)."""
    query = select(EventLogRow.response_id).where(EventLogRow.response_id == response_id)
    return db.run(lambda session: session.execute(query).first() is not None)


def test_reaper_finds_unleased_responses_in_one_read(db: Database, redis: redis_lib.Redis, settings: Settings) -> None:
    lost, running, also_lost = (in_progress(db, redis, settings) for _ in range(3))
    redis.set(redis_keys.lease(running), "alive-worker", px=5000)
    assert reaper(db, redis, settings).unleased([lost, running, also_lost]) == [lost, also_lost]
    assert reaper(db, redis, settings).unleased([]) == []


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_reaper_purges_and_sweeps_once_per_housekeeping_interval(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    clock = FakeClock()
    sent: list[tuple] = []  # type: ignore[type-arg]
    pass_maker = Reaper(db, redis, worker_id="test", interval_seconds=1, lease_seconds=3, event_ttl_seconds=60,
                        stale_queued_seconds=600, clock=clock,
                        dispatch=lambda response_id, model, secrets: sent.append((response_id, model)))
    assert pass_maker.housekeeping_seconds == 60
    assert pass_maker.reap_once() == []  # the first pass housekeeps
    expired = accept(db, redis, settings, input="hi")
    db.run(save_event_log, expired, 0, [b"x"], utcnow() - timedelta(seconds=1))
    stale = accept(db, redis, settings, input="hi", background=True)
    overwrite_row(db, stale, created_at=utcnow() - timedelta(hours=1))
    announce_worker(redis, "gpt-oss-20b")

    clock.now += 59
    assert pass_maker.reap_once() == [] and sent == []
    assert has_row(db, expired)

    clock.now += 1
    assert pass_maker.reap_once() == [stale] and sent == [(stale, "gpt-oss-20b")]
    assert not has_row(db, expired)


def test_reaper_leaves_fresh_handoff_to_its_queued_task(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = in_progress(db, redis, settings)
    redis.set(redis_keys.resume(response_id), HANDOFF, ex=3600)  # handed off just now
    sent: list[tuple] = []  # type: ignore[type-arg]

    assert dispatching_reaper(db, redis, sent, event_ttl_seconds=3600).reap_once() == [] and sent == []


def test_reaper_dispatches_handoff_again_when_no_worker_took_it(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = in_progress(db, redis, settings)
    reaper = dispatching_reaper(db, redis, sent := [], event_ttl_seconds=3600)
    redis.set(redis_keys.resume(response_id), HANDOFF, ex=3600 - reaper.resume_seconds)  # its task was lost

    assert reaper.reap_once() == [response_id]
    assert reaper.reap_once() == []  # dispatched again once per resume_seconds, not every pass
    assert sent == [(response_id, "gpt-oss-20b")]
    # Still a handoff: the worker that takes it over does not count a loss.
    assert redis.get(redis_keys.resume(response_id)) == HANDOFF.encode()
    assert redis.ttl(redis_keys.resume(response_id)) > 3600 - reaper.resume_seconds


def test_reaper_through_database_restart_logs_outage_in_two_lines_without_traceback(
    redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # It logged a line a pass, a line a second, for as long as the database was away (8 in an 8 s restart).
    cluster = start_postgres()
    try:
        database_url = cluster.create_database("reaped")
        migrate(database_url)
        db = Database(database_url)
        reaping = Reaper(db, redis, worker_id="test", interval_seconds=0.05, lease_seconds=3, event_ttl_seconds=60)
        with caplog.at_level("WARNING"):
            reaping.start()
            cluster.shut_down()
            time.sleep(1.5)  # some 30 passes
            cluster.start_again()
            deadline = time.monotonic() + 10
            while not any("answers again" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
                time.sleep(0.05)
            reaping.stop()
        db.dispose()
    finally:
        cluster.stop()
    assert [r for r in caplog.records if r.exc_info] == []
    told = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(told) == 2, told
    assert told[0].startswith("the database unreachable (OperationalError: ") and "\n" not in told[0]
    assert told[1].startswith("the database answers again after ")


def clock_runs_ahead(monkeypatch: pytest.MonkeyPatch, module: object, settings: Settings, hours: float) -> None:
    """``module``'s wall clock ``hours`` fast, as on a worker host whose clock drifted (``ON_POSTGRESQL_ONLY``)."""
    monkeypatch.setattr(module, "utcnow", lambda: utcnow() + timedelta(hours=hours), raising=False)


@ON_POSTGRESQL_ONLY
def test_reaper_keeps_fresh_responses_when_its_clock_runs_hours_ahead(
    database_url: str, db: Database, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reaper's lock elects any worker: one host 2 hours fast deleted every response that ended in the
    last 2 hours under a 1-hour retention (the clock probe)."""
    clock_runs_ahead(monkeypatch, reaper_module, settings, hours=2)
    fresh = accept(db, redis, settings, input="hi")
    overwrite_row(db, fresh, status="completed")
    keeping = Reaper(db, redis, worker_id="test", interval_seconds=0.5, lease_seconds=3, event_ttl_seconds=60,
                     retention_seconds=3600)

    keeping.reap_once()

    assert db.run(get_response, fresh) is not None


@ON_POSTGRESQL_ONLY
def test_reaper_leaves_fresh_queued_response_when_its_clock_runs_ahead(
    database_url: str, db: Database, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker 11 minutes fast took every response queued a moment ago for one queued over 600 s, and sent
    each one's task again (a warning each; the copies counted against the model's queue limit)."""
    clock_runs_ahead(monkeypatch, reaper_module, settings, hours=11 / 60)
    fresh = accept(db, redis, settings, input="hi", background=True)
    announce_worker(redis, "gpt-oss-20b")
    sent: list[tuple] = []  # type: ignore[type-arg]

    assert dispatching_reaper(db, redis, sent).reap_once() == []
    assert sent == [] and db.run(get_response, fresh) is not None


def test_reaper_fails_lost_response_whose_lease_key_holds_something_else(
    db: Database, redis: redis_lib.Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """Its lease key replaced by a list (by hand, another application, a bug), with no TTL: no worker could take
    it (SET NX finds the key), the reaper dispatched nothing (the key exists), and it stayed in_progress for good."""
    response_id = in_progress(db, redis, settings)
    redis.rpush(redis_keys.lease(response_id), "not a lease")
    sent: list[tuple] = []  # type: ignore[type-arg]
    assert dispatching_reaper(db, redis, sent).reap_once() == [response_id] and sent == []
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "failed"
    assert record.error is not None and record.error["message"] == reaper_module.LEASE_OVERWRITTEN_MESSAGE
    events = events_of(redis, response_id)
    assert_contiguous(events)
    assert events[-1]["type"] == "response.failed" and is_closed(redis, response_id)
    assert redis.type(redis_keys.lease(response_id)) == b"list"  # left as it is
    assert any(redis_keys.lease(response_id) in record.getMessage() for record in caplog.records)
    assert dispatching_reaper(db, redis, sent).reap_once() == [] and sent == []


def test_reaper_dispatches_takeover_of_lost_response_whose_resume_mark_holds_something_else(
    db: Database, redis: redis_lib.Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """Its resume mark replaced by a list (by hand, another application, a bug): the mark's GET raised WRONGTYPE,
    which stopped every pass there, every second, so no lost response, unclosed stream or housekeeping behind it
    was handled. The mark means only that a dispatch waits: it is replaced, the takeover dispatched."""
    overwritten = in_progress(db, redis, settings)
    other = in_progress(db, redis, settings)
    redis.rpush(redis_keys.resume(overwritten), "not a mark")
    sent: list[tuple] = []  # type: ignore[type-arg]
    with caplog.at_level("WARNING", logger="oss_responses.workers.reaper"):
        assert sorted(dispatching_reaper(db, redis, sent).reap_once()) == sorted([overwritten, other])
    assert sorted(sent) == sorted([(overwritten, "gpt-oss-20b"), (other, "gpt-oss-20b")])
    assert redis.get(redis_keys.resume(overwritten)) == b"reaper"
    assert any(redis_keys.resume(overwritten) in r.getMessage() and r.exc_info is None for r in caplog.records)
    assert dispatching_reaper(db, redis, sent).reap_once() == [] and len(sent) == 2  # its takeover waits now


def test_reaper_sends_task_of_stale_queued_response_again_whose_resume_mark_holds_something_else(
    db: Database, redis: redis_lib.Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A list there has no TTL and SET NX found it every period: the response's lost task was never sent again."""
    stale = accept(db, redis, settings, input="hi", background=True)
    overwrite_row(db, stale, created_at=utcnow() - timedelta(hours=1))
    redis.rpush(redis_keys.resume(stale), "not a mark")
    announce_worker(redis, "gpt-oss-20b")
    sent: list[tuple] = []  # type: ignore[type-arg]
    with caplog.at_level("WARNING", logger="oss_responses.workers.reaper"):
        assert dispatching_reaper(db, redis, sent).reap_once() == [stale]
    assert sent == [(stale, "gpt-oss-20b")] and redis.get(redis_keys.resume(stale)) == b"sweeper"
    assert any(redis_keys.resume(stale) in r.getMessage() for r in caplog.records)


def test_reaper_pass_goes_on_past_a_response_it_cannot_handle(
    db: Database, redis: redis_lib.Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """One response whose reap raised (a bug, a key of its own holding something unforeseen) stopped the whole
    pass, every pass: every other lost response, unclosed stream and housekeeping task behind it waited for good."""
    broken, other = in_progress(db, redis, settings), in_progress(db, redis, settings)
    stale = accept(db, redis, settings, input="hi", background=True)
    overwrite_row(db, stale, created_at=utcnow() - timedelta(hours=1))
    announce_worker(redis, "gpt-oss-20b")
    reaping = dispatching_reaper(db, redis, sent := [])
    dispatch_takeover = reaping._dispatch_takeover

    def reap(response_id: str) -> bool:
        if response_id == broken:
            raise RuntimeError("unforeseen")
        return dispatch_takeover(response_id)

    reaping._dispatch_takeover = reap  # type: ignore[method-assign]
    with caplog.at_level("WARNING", logger="oss_responses.workers.reaper"):
        assert sorted(reaping.reap_once()) == sorted([other, stale])
    assert sorted(sent) == sorted([(other, "gpt-oss-20b"), (stale, "gpt-oss-20b")])
    assert any(broken in r.getMessage() and r.levelname == "ERROR" and r.exc_info for r in caplog.records)


def test_reaper_replaces_open_streams_key_holding_something_else(
    db: Database, redis: redis_lib.Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """The open streams' key set to a string (by hand, another application, a bug): every pass's SMEMBERS raised
    WRONGTYPE, so no lost response was dispatched, for anyone, and every claim's SADD and every end's SREM was
    refused. What it listed is lost with it: it is deleted, and the pass goes on."""
    lost = in_progress(db, redis, settings)
    redis.delete(redis_keys.OPEN_STREAMS)
    redis.set(redis_keys.OPEN_STREAMS, "not a set")
    sent: list[tuple] = []  # type: ignore[type-arg]
    with caplog.at_level("WARNING", logger="oss_responses.workers.reaper"):
        assert dispatching_reaper(db, redis, sent).reap_once() == [lost]
    assert sent == [(lost, "gpt-oss-20b")] and not redis.exists(redis_keys.OPEN_STREAMS)
    assert any(redis_keys.OPEN_STREAMS in r.getMessage() and r.exc_info is None for r in caplog.records)


@pytest.mark.parametrize("overwrite", ["list", "string"])
def test_reaper_takes_its_lock_key_overwritten_without_expiry(
    db: Database, redis: redis_lib.Redis, settings: Settings, caplog: pytest.LogCaptureFixture, overwrite: str
) -> None:
    """The lock's key replaced by a list, or a string with no expiry (by hand, another application, a bug): SET NX
    found it every pass, and no reaper ran again anywhere, silently: lost responses stayed in_progress for good."""
    lost = in_progress(db, redis, settings)
    if overwrite == "list":
        redis.rpush(REAPER_LOCK, "not a lock")
    else:
        redis.set(REAPER_LOCK, "not a lock")
    sent: list[tuple] = []  # type: ignore[type-arg]
    with caplog.at_level("WARNING", logger="oss_responses.workers.reaper"):
        assert dispatching_reaper(db, redis, sent).reap_once() == [lost]
    assert sent == [(lost, "gpt-oss-20b")] and not redis.exists(REAPER_LOCK)  # released after the pass
    assert any(REAPER_LOCK in r.getMessage() and r.exc_info is None for r in caplog.records)


def test_reaper_cancels_running_foreground_response_whose_api_process_stays_gone(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    """Once its liveness key has been missing for GONE_AFTER_SECONDS (a process that wrote it again meanwhile, as
    after a Redis outage that outlasted the key, keeps its responses), once, as its client's disconnect would;
    a running response relayed by a live process, or background (no relay), is left running."""
    clock = FakeClock()
    pass_maker = Reaper(db, redis, worker_id="test", interval_seconds=1, lease_seconds=3, event_ttl_seconds=60,
                        clock=clock)
    orphan, relayed, back, background = (in_progress(db, redis, settings) for _ in range(4))
    for response_id in (orphan, relayed, back, background):
        redis.set(redis_keys.lease(response_id), "alive-worker", px=60_000)
    for response_id, instance in ((orphan, "killed"), (relayed, "running"), (back, "restarted")):
        redis.set(redis_keys.relay(response_id), instance)
    redis.set(redis_keys.api_alive("running"), "1")
    with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
        pubsub.subscribe(redis_keys.CANCEL_CHANNEL)
        assert pass_maker.reap_once() == []
        redis.set(redis_keys.api_alive("restarted"), "1")
        clock.now += relays.GONE_AFTER_SECONDS
        assert pass_maker.reap_once() == [orphan]
        assert pass_maker.reap_once() == []  # asked once: the worker running it ends it
        published = [pubsub.get_message(timeout=1) for _ in range(2)]
    assert [message["data"] for message in published if message] == [orphan.encode()]
    assert [bool(redis.exists(redis_keys.cancel(rid))) for rid in (orphan, relayed, back, background)] == [
        True, False, False, False]
