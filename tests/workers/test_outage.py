"""Which failures mean a store did not answer (the task runs again) and which do not (it fails)."""

from __future__ import annotations

import sqlite3

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import IntegrityError, OperationalError

from oss_responses.workers.outage import Backoff, unreachable


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


def test_backoff_doubles_its_pause_until_its_deadline() -> None:
    backoff = Backoff(0.3)
    assert not backoff.exhausted()
    backoff.wait()
    assert backoff.delay == 0.5
    assert backoff.exhausted()  # 0.25 s slept, the next 0.5 s pause would end past 0.3 s
