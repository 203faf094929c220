"""A store's outage told in a few lines (``outage_log.py``): its start, a reminder now and then, its end."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.exc import OperationalError
from support.sqlite_refusals import fill, full_database

from oss_responses.outage_log import OutageLog
from oss_responses.storage.db import refused_write

log = logging.getLogger("test_outage_log")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def outage(clock: Clock) -> OutageLog:
    return OutageLog(log, "the store", remind_seconds=30, clock=clock)


def told(caplog: pytest.LogCaptureFixture) -> list[str]:
    assert [r for r in caplog.records if r.exc_info] == []  # an outage is a line, never a traceback
    return [r.getMessage() for r in caplog.records if r.name == log.name]


def test_failed_tries_tell_outage_once_until_reminder_is_due(outage: OutageLog, clock: Clock, caplog) -> None:
    for _ in range(59):  # a try every half second for 29.5 s
        outage.failed(RedisConnectionError("Error 111 connecting"))
        clock.now += 0.5
    assert told(caplog) == ["the store unreachable (ConnectionError: Error 111 connecting); retrying until it answers"]


def test_failed_tries_remind_of_outage_every_remind_seconds(outage: OutageLog, clock: Clock, caplog) -> None:
    for _ in range(130):  # 65 s
        outage.failed(RedisConnectionError("Error 111 connecting"))
        clock.now += 0.5
    assert told(caplog)[1:] == [
        "the store still unreachable after 30 s (ConnectionError: Error 111 connecting); retrying",
        "the store still unreachable after 60 s (ConnectionError: Error 111 connecting); retrying",
    ]


def test_answered_tells_end_of_outage_once_with_its_last_error(outage: OutageLog, clock: Clock, caplog) -> None:
    outage.failed(RedisConnectionError("Error 111 connecting"))
    clock.now += 2.5
    outage.failed(BusyLoadingError("Redis is loading the dataset in memory"))
    outage.answered()
    outage.answered()
    assert told(caplog)[1:] == [
        "the store answers again after 2.5 s (2 failed tries, the last BusyLoadingError: Redis is loading the "
        "dataset in memory)"
    ]
    assert not outage.ongoing


def test_answered_without_outage_tells_nothing(outage: OutageLog, caplog) -> None:
    outage.answered()
    assert told(caplog) == []


def test_failed_after_answered_tells_new_outage(outage: OutageLog, clock: Clock, caplog) -> None:
    outage.failed(RedisConnectionError("first"))
    outage.answered()
    clock.now += 1
    outage.failed(RedisConnectionError("second"))
    assert told(caplog)[2] == "the store unreachable (ConnectionError: second); retrying until it answers"


def test_failed_tells_database_error_in_one_line(outage: OutageLog, caplog) -> None:
    # SQLAlchemy's message adds its SQL and a link on lines of their own: a log line split in three.
    error = OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))
    outage.failed(error)
    [line] = told(caplog)
    assert line == ("the store unreachable (OperationalError: (builtins.ConnectionRefusedError) connection refused); "
                    "retrying until it answers")


@pytest.fixture
def disk_full(tmp_path: Path) -> OperationalError:
    """A real SQLITE_FULL, as SQLAlchemy raises it."""
    db = full_database(tmp_path / "full.db")
    try:
        with pytest.raises(OperationalError) as refused:
            fill(db)
    finally:
        db.dispose()
    return refused.value


@pytest.fixture
def database_outage(clock: Clock) -> OutageLog:
    return OutageLog(log, "the database", remind_seconds=30, clock=clock, refusal=refused_write)


def test_failed_tells_refused_write_as_refusing_writes(database_outage: OutageLog, disk_full, caplog) -> None:
    database_outage.failed(disk_full)
    assert told(caplog) == ["the database refuses writes (disk full: OperationalError: (sqlite3.OperationalError) "
                            "database or disk is full); retrying until it takes them"]


def test_answered_by_read_leaves_refused_writes_outage_ongoing(database_outage: OutageLog, clock: Clock, disk_full,
                                                               caplog) -> None:
    """Reads go on through a full disk: a worker's reaper passes that read told the outage over each second,
    and the next save's refusal told it begun again (22 pairs of lines in 40 s)."""
    for _ in range(3):
        database_outage.failed(disk_full)
        clock.now += 1
        database_outage.answered(wrote=False)
    database_outage.answered()
    assert told(caplog)[1:] == [
        "the database takes writes again after 3.0 s (3 failed tries, the last OperationalError: "
        "(sqlite3.OperationalError) database or disk is full)"
    ]


def test_failed_tells_error_without_message_by_its_type(outage: OutageLog, caplog) -> None:
    # A silent Redis's read times out with asyncio's TimeoutError, which has no message: the line read "TimeoutError: ".
    outage.failed(TimeoutError())
    assert told(caplog) == ["the store unreachable (TimeoutError); retrying until it answers"]
