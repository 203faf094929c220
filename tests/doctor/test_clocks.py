"""The doctor's check that the hosts' clocks agree with Redis's, against a real redis-server."""

from __future__ import annotations

import json
import time

import pytest
import redis as redis_lib

from oss_responses import clocks, redis_keys
from oss_responses.config import Settings
from oss_responses.doctor.clocks import check_clocks


def _announce(url: str, worker_id: str, pid: int, clock_skew: float | None) -> None:
    # What a worker keeps set while its engine is up (workers/context.py); no skew: a release before it.
    announced: dict[str, object] = {"model": "gpt-oss-20b", "engine": "scripted", "pid": pid}
    if clock_skew is not None:
        announced["clock_skew"] = clock_skew
    client = redis_lib.Redis.from_url(url)
    client.set(redis_keys.worker_ready(worker_id), json.dumps(announced))
    client.close()


def test_check_clocks_ok_when_host_and_workers_agree(own_redis_url: str) -> None:
    _announce(own_redis_url, "w1", 11, 0.004)
    _announce(own_redis_url, "w2", 12, None)
    results = list(check_clocks(Settings(redis_url=own_redis_url)))
    assert [(result.status, result.detail) for result in results] == [
        ("ok", "this host and 2 ready worker(s) within 2 s of Redis's clock")
    ]


def test_check_clocks_warns_of_ready_workers_whose_clock_is_off(own_redis_url: str) -> None:
    _announce(own_redis_url, "w1", 11, 0.01)
    _announce(own_redis_url, "w2", 12, -600.4)
    _announce(own_redis_url, "w3", 13, 3.5)
    results = list(check_clocks(Settings(redis_url=own_redis_url)))
    assert [result.status for result in results] == ["warn"]
    assert results[0].detail.startswith("2 ready worker(s) have a clock over 2 s from Redis's (up to -600.4 s")
    assert "13" in results[0].detail and "12" in results[0].detail and "NTP" in results[0].detail


def test_check_clocks_warns_of_this_host_clock_off(own_redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = time.time
    monkeypatch.setattr(clocks.time, "time", lambda: real() + 120)
    results = list(check_clocks(Settings(redis_url=own_redis_url)))
    assert [result.status for result in results] == ["warn"]
    assert results[0].detail.startswith("this host's clock is +120.0 s from Redis's")


def test_check_clocks_without_redis_says_not_checked() -> None:
    results = list(check_clocks(Settings(redis_url="redis://127.0.0.1:1/0")))
    assert [result.status for result in results] == ["warn"]
    assert "not checked" in results[0].detail
