"""The worker's consumer: Celery's, trying a lost broker again about every second, each worker at its own pace."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from celery.worker.consumer import consumer as celery_consumer

from oss_responses.workers import consumer


def test_reconnect_interval_is_each_consumers_own_from_one_second() -> None:
    intervals = [consumer.reconnect_interval() for _ in range(50)]
    assert all(1.0 <= interval <= 1.25 for interval in intervals)  # below 1 s Celery's line says "now"
    assert len(set(intervals)) > 1  # a fleet that lost the same Redis at once does not try it again in step


def test_ensure_connected_tries_the_broker_at_one_steady_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[Any] = []
    monkeypatch.setattr(celery_consumer.Consumer, "ensure_connected", lambda self, conn: given.append(conn))
    monkeypatch.setattr(consumer, "reconnect_interval", lambda: 1.1)
    conn = SimpleNamespace(ensure_connection=lambda *args, **kwargs: (args, kwargs))

    consumer.Consumer.ensure_connected(object.__new__(consumer.Consumer), conn)

    assert given == [conn]
    _, options = conn.ensure_connection("errback")
    assert (options["interval_start"], options["interval_step"], options["interval_max"]) == (1.1, 0, 1.1)
    assert options["timeout"] == consumer.GIVE_UP_SECONDS
