"""Which failures mean a store did not answer (the task runs again) and which do not (it fails); a worker
starting while Redis is away, or on a database behind its migrations."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from support import TIKTOKEN_DIR
from support.servers import PostgresCluster, free_port
from support.sqlite_refusals import unwritable

from oss_responses.eventlog.writes import EventWriteError
from oss_responses.storage import Database, migrate
from oss_responses.storage.migrations import newest_revision
from oss_responses.workers.outage import (
    Backoff,
    StoreAwayAtStart,
    unreachable,
    wait_for_database,
    wait_for_redis,
    warn_failed,
)

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
# The revision before conversation_through (0009): the newest release's first statements name it.
OLD_REVISION = "0008"


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


@pytest.mark.parametrize("exc", [
    ReadOnlyError("You can't write against a read only replica."),
    ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk"),
], ids=["read-only replica", "misconf"])
def test_unreachable_counts_write_refused_by_redis(exc: BaseException) -> None:
    assert unreachable(exc)


def test_unreachable_counts_write_refused_by_full_redis(redis: redis_lib.Redis) -> None:
    # maxmemory under noeviction (README's recommendation): failed, every queued response whose task met
    # it ended failed, where it runs once the operator raises maxmemory (the redislimits probe).
    redis.config_set("maxmemory", 1)
    try:
        with pytest.raises(ResponseError) as refused:
            redis.set("k", "v")
    finally:
        redis.config_set("maxmemory", 0)
    assert unreachable(refused.value)


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


def test_unreachable_counts_pool_whose_connections_stay_busy_past_its_timeout(tmp_path: Path) -> None:
    """A worker's threads outnumber its pool (concurrency 64, 26 connections) and a lock holds the transactions
    of the others (an operator's LOCK, a migration): a save waiting for a connection past the pool's timeout
    raised SQLAlchemy's own TimeoutError, which is no DBAPIError. Counted as a bug, it failed the task of a
    generated turn (35 tracebacks for 60 responses behind a 45 s lock, each taken over once its lease lapsed)
    where the lock's end would have let the save through."""
    url = f"sqlite:///{tmp_path / 'pool.db'}"
    migrate(url)
    db = Database(url, pool_size=1, max_overflow=0, pool_timeout=0.1)
    try:
        with db.engine.connect(), pytest.raises(SQLAlchemyTimeoutError) as caught:  # the pool's one connection busy
            db.run(lambda session: session.execute(text("SELECT 1")))
    finally:
        db.dispose()
    assert unreachable(caught.value)


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


@pytest.fixture(params=BACKENDS)
def old_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database the previous releases migrated (``OLD_REVISION``), not yet this build's."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.db'}"
        migrate(url, OLD_REVISION)
        yield url
        return
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    name = f"old_schema_{os.getpid()}_{time.monotonic_ns()}"
    url = cluster.create_database(name)
    migrate(url, OLD_REVISION)
    yield url
    cluster.drop_database(name)


def _wait_for_database(url: str, seconds: float) -> None:
    database = Database(url, pool_size=1)
    try:
        wait_for_database(database, seconds)
    finally:
        database.dispose()


def _waiting_for_database(url: str, waited: list[BaseException | None]) -> threading.Thread:
    """A thread waiting for the database at ``url`` (30 s at most); ``waited`` gets None once it returned, or
    what it raised."""
    def wait() -> None:
        try:
            _wait_for_database(url, seconds=30)
            waited.append(None)
        except BaseException as exc:  # noqa: BLE001  # reported by the caller's assert
            waited.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    return waiter


def test_wait_for_database_gives_up_on_database_behind_this_build(old_database_url: str) -> None:
    with pytest.raises(StoreAwayAtStart, match=rf"is at revision {OLD_REVISION}, behind this release's "
                                               rf"{newest_revision()}: run `oss-responses migrate`"):
        _wait_for_database(old_database_url, seconds=0.5)


def test_wait_for_database_returns_once_database_is_migrated(old_database_url: str) -> None:
    waited: list[BaseException | None] = []
    waiter = _waiting_for_database(old_database_url, waited)
    time.sleep(0.5)
    assert not waited
    migrate(old_database_url)
    waiter.join(timeout=15)
    assert waited == [None]


def test_wait_for_database_gives_up_on_sqlite_file_refusing_writes(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    migrate(f"sqlite:///{path}")
    with unwritable(path), pytest.raises(StoreAwayAtStart, match=r"is refusing writes \(read-only\)$"):
        _wait_for_database(f"sqlite:///{path}", seconds=0.5)


def test_wait_for_database_returns_once_sqlite_file_takes_writes(tmp_path: Path) -> None:
    """The wait's pooled connection opened the file read-only, and SQLite keeps a connection so for good: the
    wait went on after the file took writes again, until it gave up."""
    path = tmp_path / "db.sqlite"
    migrate(f"sqlite:///{path}")
    waited: list[BaseException | None] = []
    with unwritable(path):
        waiter = _waiting_for_database(f"sqlite:///{path}", waited)
        time.sleep(1.0)
        assert not waited
    waiter.join(timeout=15)
    assert waited == [None]


@pytest.mark.postgres
def test_wait_for_database_gives_up_on_read_only_postgresql(postgres_cluster: PostgresCluster) -> None:
    name = f"read_only_{os.getpid()}_{time.monotonic_ns()}"
    url = postgres_cluster.create_database(name)
    migrate(url)
    postgres_cluster.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    try:
        with pytest.raises(StoreAwayAtStart, match=r"is refusing writes \(read-only\)$"):
            _wait_for_database(url, seconds=0.5)
    finally:
        postgres_cluster.drop_database(name)


def test_worker_started_on_database_behind_this_build_exits_saying_to_migrate(redis_url: str, tmp_path: Path) -> None:
    """A release's workers started before its migration ran (a rolling deploy whose migrate job is late):
    the start's first statement met the missing column, and the worker stopped on the driver's error and
    its SQL, where a running worker waits for the migration."""
    database_url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate(database_url, OLD_REVISION)
    env = {**os.environ, "OSS_RESPONSES_REDIS_URL": redis_url,
           "OSS_RESPONSES_DATABASE_URL": database_url, "OSS_RESPONSES_SAVE_RETRY_SECONDS": "1",
           "OSS_RESPONSES_TIKTOKEN_DIR": str(TIKTOKEN_DIR), "OSS_RESPONSES_WORKER_METRICS_PORT": "0"}
    worker = subprocess.run([sys.executable, "-m", "oss_responses.workers"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert worker.returncode == 1
    assert (f"oss-responses worker not started: the database at {database_url} is at revision {OLD_REVISION}, "
            f"behind this release's {newest_revision()}") in worker.stdout
    assert "no such column" not in worker.stdout


@pytest.mark.parametrize("cause", [
    ConnectionRefusedError(111, "Connection refused"),
    RedisConnectionError("Error 111 connecting"),
    OperationalError("SELECT 1", {}, sqlite3.OperationalError("database is locked")),
], ids=["writer's connection", "redis", "database"])
def test_warn_failed_names_outage_in_one_line_without_traceback(cause: Exception, caplog) -> None:
    # A Redis restart logged a traceback at every call that met it (the run left to a takeover, its lease's
    # release, the archive): an outage is a known condition, its error says it all.
    try:
        raise EventWriteError("a write did not reach Redis") from cause
    except EventWriteError as exc:
        warn_failed(logging.getLogger("test"), exc, "the event log of %s is unreachable", "resp_a")
    [record] = caplog.records
    assert not record.exc_info
    first_line = str(cause).splitlines()[0]  # a SQLAlchemy error's SQL and link left out
    assert record.getMessage() == f"the event log of resp_a is unreachable ({type(cause).__name__}: {first_line})"


def test_warn_failed_keeps_traceback_of_what_is_no_outage(caplog) -> None:
    try:
        raise EventWriteError("a write did not reach Redis") from ValueError("a bug")
    except EventWriteError as exc:
        warn_failed(logging.getLogger("test"), exc, "the event log of %s is unreachable", "resp_a")
    [record] = caplog.records
    assert record.exc_info
    assert record.getMessage() == "the event log of resp_a is unreachable (ValueError: a bug)"


def test_warn_failed_names_database_outage_in_one_line_without_traceback(caplog) -> None:
    # SQLAlchemy raises its error from the driver's: judged by that one, an outage counted as none (a
    # traceback), and its message took three lines (its SQL, a link).
    try:
        try:
            raise sqlite3.OperationalError("unable to open database file")
        except sqlite3.OperationalError as driver_error:
            raise OperationalError("SELECT 1", {}, driver_error) from driver_error
    except OperationalError as exc:
        warn_failed(logging.getLogger("test"), exc, "archiving the event log of %s failed", "resp_a")
    [record] = caplog.records
    assert not record.exc_info
    assert record.getMessage() == ("archiving the event log of resp_a failed (OperationalError: "
                                   "(sqlite3.OperationalError) unable to open database file)")


def test_worker_started_on_sqlite_file_refusing_writes_waits_then_exits_saying_so(
    redis_url: str, tmp_path: Path
) -> None:
    """A worker started while its SQLite file (or filesystem) was read-only stopped at once on the start's
    first write: Celery's "Unrecoverable error", two tracebacks and the UPDATE's SQL, where it waits for a
    database that does not answer."""
    path = tmp_path / "db.sqlite"
    database_url = f"sqlite:///{path}"
    migrate(database_url)
    env = {**os.environ, "OSS_RESPONSES_REDIS_URL": redis_url, "OSS_RESPONSES_LOG_FORMAT": "text",
           "OSS_RESPONSES_DATABASE_URL": database_url, "OSS_RESPONSES_SAVE_RETRY_SECONDS": "1",
           "OSS_RESPONSES_TIKTOKEN_DIR": str(TIKTOKEN_DIR), "OSS_RESPONSES_WORKER_METRICS_PORT": "0"}
    with unwritable(path):
        worker = subprocess.run([sys.executable, "-m", "oss_responses.workers"], env=env, cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    waits = [line for line in worker.stdout.splitlines() if "the worker waits for it" in line]
    assert worker.returncode == 1
    assert waits  # a line per try: 2 on an idle machine (0.25 + 0.5 s slept, the next 1 s past its 1 s)
    assert all(f"WARNING oss_responses.workers.outage: the database at {database_url} is refusing writes "
               "(read-only); the worker waits for it" in line for line in waits)
    assert (f"oss-responses worker not started: the database at {database_url} is refusing writes (read-only)"
            in worker.stdout)
    assert "attempt to write a readonly database" not in worker.stdout
    assert "Traceback" not in worker.stdout  # nor Celery's "Unrecoverable error" and the start-up's stack
