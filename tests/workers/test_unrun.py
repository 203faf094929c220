"""A response whose run raised before it started is failed at once, not left queued for the stale sweep."""

from __future__ import annotations

import pytest
import redis as redis_lib
from sqlalchemy.exc import OperationalError
from support.streams import assert_contiguous, events_of, is_closed
from support.workers import accept

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.storage import Database, get_response
from oss_responses.workers import runner
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.testing import run_response_now


def _render_raises(error: Exception):  # type: ignore[no-untyped-def]
    def render_early(*_: object) -> None:
        raise error

    return render_early


def test_run_response_raising_before_it_starts_fails_it_and_ends_its_stream(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    response_id = accept(db, redis, settings, input="hi")
    monkeypatch.setattr(runner, "render_early", _render_raises(RuntimeError("SELECT secret FROM t")))
    with pytest.raises(RuntimeError):  # still raised: the task's failure is logged with its traceback
        run_response_now(response_id, worker=worker)
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "failed"
    error = record.response["error"]
    assert error["code"] == "server_error" and "RuntimeError" in error["message"]
    assert "secret" not in error["message"]  # the exception's text stays in the worker's log
    events = events_of(redis, response_id)
    assert_contiguous(events)
    assert events[-1]["type"] == "response.failed" and is_closed(redis, response_id)


def test_run_response_meeting_database_outage_before_it_starts_leaves_it_queued(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An outage is the task's to try again (workers/tasks.py), not a reason to fail the response.
    response_id = accept(db, redis, settings, input="hi")
    outage = OperationalError("SELECT 1", {}, ConnectionRefusedError("refused"))
    monkeypatch.setattr(runner, "render_early", _render_raises(outage))
    with pytest.raises(OperationalError):
        run_response_now(response_id, worker=worker)
    assert db.run(get_response, response_id).status == "queued"  # type: ignore[union-attr]


def test_run_response_meeting_full_redis_before_it_starts_leaves_it_queued(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    # Redis at maxmemory (noeviction) refuses the claim's lease: the probe's queued responses ended failed
    # (server_error) instead of running once the operator raised maxmemory.
    response_id = accept(db, redis, settings, input="hi")
    redis.config_set("maxmemory", 1)
    try:
        with pytest.raises(redis_lib.ResponseError):
            run_response_now(response_id, worker=worker)
    finally:
        redis.config_set("maxmemory", 0)
    assert db.run(get_response, response_id).status == "queued"  # type: ignore[union-attr]


def test_run_response_raising_leaves_response_leased_elsewhere_alone(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    response_id = accept(db, redis, settings, input="hi")
    monkeypatch.setattr(runner, "load_job", _render_raises(RuntimeError("boom")))
    redis.set(redis_keys.lease(response_id), "another-worker:1:x", ex=30)  # another worker runs it
    with pytest.raises(RuntimeError):
        run_response_now(response_id, worker=worker)
    assert db.run(get_response, response_id).status == "queued"  # type: ignore[union-attr]
