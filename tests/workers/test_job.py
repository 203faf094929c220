"""Loading a response for its task: a row that cannot be loaded fails the response; a database that
does not answer midway does not (its error reaches the task, which tries again)."""

from __future__ import annotations

from typing import Any

import pytest
import redis as redis_lib
from sqlalchemy.exc import OperationalError
from support.workers import accept

from oss_responses.config import Settings
from oss_responses.storage import Database
from oss_responses.workers import job
from oss_responses.workers.job import JobLoadError, load_job


def _failing_history(exc: Exception):  # type: ignore[no-untyped-def]
    def read(*_: Any) -> None:
        raise exc

    return read


def test_load_job_raises_when_the_database_stops_answering_midway(
    db: Database, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    response_id = accept(db, redis, settings, input="hello")
    lost = OperationalError("SELECT", {}, ConnectionError("server closed the connection unexpectedly"))
    monkeypatch.setattr(job, "_with_conversation", _failing_history(lost))
    with pytest.raises(OperationalError):
        load_job(db, response_id, settings)


def test_load_job_marks_a_row_it_cannot_load(
    db: Database, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    response_id = accept(db, redis, settings, input="hello")
    monkeypatch.setattr(job, "_with_conversation", _failing_history(ValueError("a broken history")))
    loaded = load_job(db, response_id, settings)
    assert loaded is not None
    assert isinstance(loaded.load_error, JobLoadError)
    assert "a broken history" in str(loaded.load_error)
