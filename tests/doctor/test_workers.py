"""The doctor's check that every served model has a worker ready, against a real redis-server."""

from __future__ import annotations

import json

import redis as redis_lib
from support.servers import free_port

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.doctor.workers import check_workers
from oss_responses.storage.migrations import newest_revision


def _announce(url: str, worker_id: str, model: str, schema: str | None = None) -> None:
    # What a worker keeps set while its engine is up (workers/context.py); no schema: a release before it.
    client = redis_lib.Redis.from_url(url)
    announced = {"model": model, "engine": "scripted", "pid": 1, "schema": schema or newest_revision()}
    if schema == "":
        del announced["schema"]
    client.set(redis_keys.worker_ready(worker_id), json.dumps(announced))
    client.close()


def test_check_workers_warns_for_model_no_worker_serves(own_redis_url: str) -> None:
    _announce(own_redis_url, "w1", "gpt-oss-20b")
    _announce(own_redis_url, "w2", "gpt-oss-20b")
    settings = Settings(redis_url=own_redis_url, models=["gpt-oss-20b", "gpt-oss-120b"])

    results = [(r.status, r.detail) for r in check_workers(settings)]

    assert results == [
        ("ok", "gpt-oss-20b: 2 worker(s) ready"),
        ("warn", "gpt-oss-120b: no worker ready; its responses wait in the queue responses.gpt-oss-120b until one "
                 "starts"),
    ]


def test_check_workers_warns_of_workers_left_on_older_release(own_redis_url: str) -> None:
    """An upgrade that left a worker behind: one from before migration 0009 ran a new API's conversation
    turns without their conversation (the upgrade probe)."""
    _announce(own_redis_url, "w1", "gpt-oss-20b")
    _announce(own_redis_url, "w2", "gpt-oss-20b", schema="0010")
    _announce(own_redis_url, "w3", "gpt-oss-20b", schema="")  # announced no schema: older still
    settings = Settings(redis_url=own_redis_url, models=["gpt-oss-20b"])

    *_, last = check_workers(settings)

    assert last.status == "warn"
    assert last.detail.startswith(f"2 ready worker(s) run an older release (schema 0010, before 0012; this one's is "
                                  f"{newest_revision()})")


def test_check_workers_warns_it_could_not_check_when_redis_does_not_answer() -> None:
    # The Redis check FAILs for it; the workers' line still says it was not checked, not that all is well.
    results = list(check_workers(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")))
    assert [(r.status, r.detail.split(":")[0]) for r in results] == [("warn", "not checked")]
