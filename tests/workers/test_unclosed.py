"""Streams that lost their end (``workers/unclosed.py``): a response ended in SQL whose stream was never
closed is ended by the reaper's pass from what SQL holds; anything still running, or leased, is left.

Each test builds the state a lost write leaves: a response run to its end in-process, then its stream's
last entries removed (the end marker alone, or the terminal event too) and the stream listed open again.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis as redis_lib
from sqlalchemy import delete
from sqlalchemy.orm import Session
from support.streams import assert_contiguous, events_of, is_closed, stream_entries
from support.workers import accept

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.eventlog.writes import close_commands, frame_commands
from oss_responses.storage import Database, EventLogRow, get_event_log, get_response, transition
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.reaper import Reaper
from oss_responses.workers.testing import run_response_now
from oss_responses.workers.unclosed import END_LOST_MESSAGE


def reaper(db: Database, redis: redis_lib.Redis) -> Reaper:
    return Reaper(db, redis, worker_id="test", interval_seconds=0.5, lease_seconds=3, event_ttl_seconds=60)


def lose_end(redis: redis_lib.Redis, response_id: str, *, events: int = 0) -> None:
    """The stream as a Redis that lost its last writes holds it: without its end marker (and the ``events``
    last events before it), without a TTL, listed open again."""
    key = redis_keys.events(response_id)
    entries = stream_entries(redis, response_id)
    assert b"archived" not in entries[-1][1], "archived: _unarchived() puts the whole log back first"
    redis.delete(key)
    for entry_id, fields in entries[: -(events + 1)]:  # written again: XDEL would leave the last id as it was
        redis.xadd(key, fields, id=entry_id)
    redis.sadd(redis_keys.OPEN_STREAMS, response_id)


def test_reaper_ends_stream_that_lost_only_its_end_marker(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id, whole = completed_whole(worker, db, redis, settings)
    forget_archive(db, response_id)
    lose_end(redis, response_id)

    assert reaper(db, redis).reap_once() == [response_id]

    assert is_closed(redis, response_id) and events_of(redis, response_id) == whole
    assert not redis.sismember(redis_keys.OPEN_STREAMS, response_id)
    assert redis.ttl(redis_keys.events(response_id)) > 0
    assert db.run(get_event_log, response_id) is not None


def test_reaper_ends_stream_that_lost_its_terminal_event_with_the_stored_response(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id, whole = completed_whole(worker, db, redis, settings)
    forget_archive(db, response_id)
    lose_end(redis, response_id, events=3)

    reaper(db, redis).reap_once()

    events = events_of(redis, response_id)
    assert_contiguous(events)
    assert events[:-1] == whole[:-3]
    record = db.run(get_response, response_id)
    assert record is not None
    assert events[-1]["type"] == "response.completed" and events[-1]["response"] == record.response


def test_keep_archived_log_when_stream_comes_back_older(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    """A Redis restored from a snapshot taken while the response ran: its stream is back without its last
    events, unclosed and listed open, while SQL holds the response's end and its whole archived log. The
    reaper used to number the stored response's terminal event after the stream's last event (reusing a
    sequence number its clients had seen for a delta), then archive that shorter stream over the whole log."""
    response_id, whole = completed_whole(worker, db, redis, settings)
    archived = db.run(get_event_log, response_id)
    assert archived is not None
    lose_end(redis, response_id, events=4)

    assert reaper(db, redis).reap_once() == [response_id]

    after = db.run(get_event_log, response_id)
    assert after is not None and (after.event_count, after.frames) == (archived.event_count, archived.frames)
    tombstone = stream_entries(redis, response_id)
    assert len(tombstone) == 1 and tombstone[0][1] == {b"end": b"completed", b"archived": str(len(whole) - 1).encode()}
    assert events_of(redis, response_id) == whole
    assert not redis.sismember(redis_keys.OPEN_STREAMS, response_id)
    assert not redis.exists(redis_keys.journal(response_id))
    assert redis.ttl(redis_keys.events(response_id)) > 0


def test_reaper_ends_stream_of_cancelled_response_with_its_end_marker_alone(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="hi", background=True)
    assert db.run(transition, response_id, from_statuses=("queued",), to_status="cancelled")
    redis.sadd(redis_keys.OPEN_STREAMS, response_id)
    before = events_of(redis, response_id)

    reaper(db, redis).reap_once()

    assert events_of(redis, response_id) == before
    assert stream_entries(redis, response_id)[-1][1][b"end"] == b"cancelled"


def test_reaper_ends_stream_of_gone_response_with_its_failure(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="tokens 5", store=False)
    assert run_response_now(response_id, worker=worker) == "completed"
    assert db.run(get_response, response_id) is None
    lose_end(redis, response_id, events=2)

    reaper(db, redis).reap_once()

    events = events_of(redis, response_id)
    assert_contiguous(events)
    failed = events[-1]
    assert failed["type"] == "response.failed" and failed["response"]["id"] == response_id
    assert failed["response"]["error"]["message"] == END_LOST_MESSAGE
    assert stream_entries(redis, response_id)[-1][1] == {b"end": b"failed"}


def test_reaper_ends_stream_of_gone_unstored_response_for_the_unstored_ttl(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    """Its worker's end keeps a ``store: false`` stream 5 minutes; ended here, it was kept the event TTL."""
    response_id = accept(db, redis, settings, input="tokens 5", store=False)
    assert run_response_now(response_id, worker=worker) == "completed"
    lose_end(redis, response_id, events=2)
    keeping = Reaper(db, redis, worker_id="test", interval_seconds=0.5, lease_seconds=3, event_ttl_seconds=3600,
                     unstored_ttl_seconds=60)

    keeping.reap_once()

    assert is_closed(redis, response_id) and 0 < redis.ttl(redis_keys.events(response_id)) <= 60


def test_reaper_leaves_open_stream_of_running_response(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    queued = accept(db, redis, settings, input="hi", background=True)
    running = accept(db, redis, settings, input="hi", background=True)
    assert db.run(transition, running, from_statuses=("queued",), to_status="in_progress")
    redis.set(redis_keys.lease(running), "alive-worker", px=5000)
    redis.sadd(redis_keys.OPEN_STREAMS, queued, running)

    assert reaper(db, redis).reap_once() == []

    assert not is_closed(redis, queued) and not is_closed(redis, running)
    assert redis.smembers(redis_keys.OPEN_STREAMS) == {queued.encode(), running.encode()}


def test_reaper_takes_no_lease_of_queued_response_listed_open(
    db: Database, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose start met the database away let its lease go and left the response queued, listed open;
    the reaper took the lease to look at it, and the task's retry, finding it held, gave up (leased_elsewhere):
    the response stayed queued, its client waiting, until the stale sweep."""
    queued = accept(db, redis, settings, input="hi", background=True)
    redis.sadd(redis_keys.OPEN_STREAMS, queued)
    taken: list[str] = []
    look = reaper(db, redis)
    monkeypatch.setattr(look, "_leased", lambda response_id, act: bool(taken.append(response_id)))

    assert look.reap_once() == []

    assert taken == [] and not is_closed(redis, queued)
    assert redis.smembers(redis_keys.OPEN_STREAMS) == {queued.encode()}


def test_reaper_leaves_unclosed_stream_while_its_lease_is_held(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id, _ = completed_whole(worker, db, redis, settings)
    lose_end(redis, response_id)
    redis.set(redis_keys.lease(response_id), "the-worker-closing-it", px=5000)

    assert reaper(db, redis).reap_once() == []
    assert not is_closed(redis, response_id)


def test_reaper_forgets_open_stream_that_was_closed(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="tokens 5", background=True)
    assert run_response_now(response_id, worker=worker) == "completed"
    redis.sadd(redis_keys.OPEN_STREAMS, response_id)
    entries = stream_entries(redis, response_id)

    assert reaper(db, redis).reap_once() == []

    assert not redis.sismember(redis_keys.OPEN_STREAMS, response_id)
    assert stream_entries(redis, response_id) == entries


def completed_whole(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> tuple[str, list[dict[str, Any]]]:
    """A stored response run to its end, its archived log put back whole in its stream; its events."""
    response_id = accept(db, redis, settings, input="tokens 5", background=True)
    assert run_response_now(response_id, worker=worker) == "completed"
    return response_id, _unarchived(db, redis, response_id)


def forget_archive(db: Database, response_id: str) -> None:
    """The response's log as never archived (its end marker was lost before the archive could follow)."""
    def forget(session: Session) -> None:
        session.execute(delete(EventLogRow).where(EventLogRow.response_id == response_id))
    db.run(forget)


def _unarchived(db: Database, redis: redis_lib.Redis, response_id: str) -> list[dict[str, Any]]:
    """Put the archived log back in the stream as it was before its trim (a Redis that lost the trim);
    its events."""
    event_log = db.run(get_event_log, response_id)
    assert event_log is not None
    key = redis_keys.events(response_id)
    redis.delete(key)
    commands = frame_commands(response_id, enumerate(event_log.frames, start=event_log.first_sequence_number))
    with redis.pipeline(transaction=False) as pipe:
        for command in commands + close_commands(response_id, "completed", 60):
            pipe.execute_command(*command)
        pipe.execute()
    return events_of(redis, response_id)
