"""A real ``celery worker`` process (``python -m oss_responses.workers``) on a real redis-server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib
from worker_support import (
    MODEL,
    REPO,
    accept,
    assert_contiguous,
    wait_for_end,
    wait_for_event,
    worker_settings,
)

from oss_responses.config import Settings
from oss_responses.storage import Database, get_response
from oss_responses.workers.celery_app import enqueue, make_celery

START_TIMEOUT_S = 30.0


class WorkerProcess:
    def __init__(self, settings: Settings, name: str, log_dir: Path) -> None:
        env = os.environ | {
            "OSS_RESPONSES_DATABASE_URL": settings.database_url,
            "OSS_RESPONSES_REDIS_URL": settings.redis_url,
            "OSS_RESPONSES_TIKTOKEN_DIR": str(settings.tiktoken_dir),
            "OSS_RESPONSES_WORKER_MODEL": MODEL,
            "OSS_RESPONSES_WORKER_CONCURRENCY": "4",
            "OSS_RESPONSES_LEASE_SECONDS": str(settings.lease_seconds),
            "OSS_RESPONSES_REAPER_INTERVAL_SECONDS": str(settings.reaper_interval_seconds),
            "OSS_RESPONSES_SCRIPTED_TOKENS_PER_SECOND": str(settings.scripted_tokens_per_second),
        }
        self.log = log_dir / f"{name}.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "oss_responses.workers", "-n", f"{name}@%h", "--loglevel", "INFO"],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            )

    def wait_ready(self, redis: redis_lib.Redis, known: set[bytes]) -> None:
        """Until a new readiness key appears (set once this worker's engine is up)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited {self.process.returncode}: {self.log.read_text()[-2000:]}")
            if set(redis.scan_iter("oss:worker:*:ready")) - known:
                return
            time.sleep(0.05)
        raise TimeoutError(f"worker not ready: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def start_worker(tmp_path: Path, redis: redis_lib.Redis) -> Iterator:  # type: ignore[type-arg]
    started: list[WorkerProcess] = []

    def start(settings: Settings, name: str) -> WorkerProcess:
        known = set(redis.scan_iter("oss:worker:*:ready"))
        worker = WorkerProcess(settings, name, tmp_path)
        started.append(worker)
        worker.wait_ready(redis, known)
        return worker

    yield start
    for worker in started:
        worker.stop()


def test_celery_worker_runs_enqueued_response_end_to_end(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    settings = worker_settings(database_url, redis_url)
    db = Database(settings.database_url)
    start_worker(settings, "e2e")
    response_id = accept(db, redis, settings, input="hello celery", background=True)
    enqueue(make_celery(settings), settings, response_id, MODEL)
    events = wait_for_end(redis, response_id)
    assert_contiguous(events)
    assert events[-1]["type"] == "response.completed"
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "completed"
    db.dispose()


def test_sigkilled_worker_response_is_failed_by_another_worker(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    settings = worker_settings(
        database_url, redis_url, scripted_tokens_per_second=20.0, lease_seconds=1.5, reaper_interval_seconds=0.3
    )
    db = Database(settings.database_url)
    doomed = start_worker(settings, "doomed")
    response_id = accept(db, redis, settings, input="tokens 5000", background=True)
    enqueue(make_celery(settings), settings, response_id, MODEL)
    wait_for_event(redis, response_id, "response.output_text.delta")
    os.kill(doomed.process.pid, signal.SIGKILL)
    doomed.process.wait()
    start_worker(settings, "survivor")
    events = wait_for_end(redis, response_id, timeout=20)
    assert_contiguous(events)
    assert events[-1]["type"] == "response.failed"
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "failed"
    db.dispose()
