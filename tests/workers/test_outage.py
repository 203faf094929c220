"""Which failures mean a store did not answer (the task runs again) and which do not (it fails); a worker
starting while Redis is away."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from support import TIKTOKEN_DIR
from support.servers import PostgresCluster, free_port

from oss_responses.storage import Database
from oss_responses.workers.outage import Backoff, StoreAwayAtStart, unreachable, wait_for_redis


@pytest.mark.parametrize("exc", [
    OperationalError("SELECT 1", {}, sqlite3.OperationalError("connection refused")),
    RedisConnectionError("Error 111 connecting"),
    RedisTimeoutError("Timeout reading from socket"),
], ids=["database", "redis connection", "redis timeout"])
def test_unreachable_store_is_tried_again(exc: BaseException) -> None:
    assert unreachable(exc)


@pytest.mark.parametrize("exc", [
    IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed")),
    ResponseError("NOSCRIPT"),
    ValueError("a bug"),
], ids=["constraint", "redis refusal", "bug"])
def test_refusal_or_bug_is_not_tried_again(exc: BaseException) -> None:
    assert not unreachable(exc)


@pytest.mark.postgres
def test_unreachable_counts_write_refused_by_read_only_database(postgres_cluster: PostgresCluster) -> None:
    """A failover's demoted primary refuses writes for a while: saving a generated turn then must be tried
    again, not failed (raised, it failed the response, and each takeover after failed the same way until
    the response ended ``worker_lost``)."""
    db = Database(postgres_cluster.url("postgres"))
    try:
        with pytest.raises(DBAPIError) as refused, db.session() as session:
            session.execute(text("SET TRANSACTION READ ONLY"))
            session.execute(text("CREATE TEMPORARY TABLE t (x int)"))
    finally:
        db.dispose()
    assert unreachable(refused.value)


@pytest.mark.postgres
def test_unreachable_counts_column_missing_from_database_behind_this_build(postgres_cluster: PostgresCluster) -> None:
    """A release's workers started before its migration ran: each response they took failed on the
    missing column (PostgreSQL's UndefinedColumn), where waiting lets the migration end it."""
    db = Database(postgres_cluster.url("postgres"))
    try:
        with pytest.raises(DBAPIError) as missing, db.session() as session:
            session.execute(text("SELECT no_such_column FROM pg_database"))
    finally:
        db.dispose()
    assert unreachable(missing.value)


def test_backoff_doubles_its_pause_until_its_deadline() -> None:
    backoff = Backoff(0.3)
    assert not backoff.exhausted()
    backoff.wait()
    assert backoff.delay == 0.5
    assert backoff.exhausted()  # 0.25 s slept, the next 0.5 s pause would end past 0.3 s


def test_wait_for_redis_returns_once_redis_answers(redis_url: str) -> None:
    wait_for_redis(redis_url, seconds=5)


def test_wait_for_redis_gives_up_after_its_time() -> None:
    started = time.monotonic()
    with pytest.raises(StoreAwayAtStart, match=r"Redis at redis://127\.0\.0\.1:\d+/0 did not answer"):
        wait_for_redis(f"redis://:secret@127.0.0.1:{free_port()}/0", seconds=0.5)
    assert time.monotonic() - started < 3


def test_wait_for_redis_stops_waiting_once_stopping() -> None:
    with pytest.raises(StoreAwayAtStart):
        wait_for_redis(f"redis://127.0.0.1:{free_port()}/0", seconds=600, stopping=lambda: True)


def test_worker_started_while_redis_is_away_stops_on_sigterm(tmp_path: Path) -> None:
    """It waited on its cancel listener's subscription for good, deaf to SIGTERM, a traceback a second."""
    env = {**os.environ, "OSS_RESPONSES_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
           "OSS_RESPONSES_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
           "OSS_RESPONSES_TIKTOKEN_DIR": str(TIKTOKEN_DIR), "OSS_RESPONSES_WORKER_METRICS_PORT": "0"}
    worker = subprocess.Popen([sys.executable, "-m", "oss_responses.workers"], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert worker.stdout is not None
        for line in worker.stdout:
            if "the worker waits for it" in line:
                break
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=15)
    finally:
        worker.kill()
    assert worker.returncode == 1
    assert "oss-responses worker not started: Redis at" in output
    assert "Traceback" not in output.split("worker: Warm shutdown")[0]
