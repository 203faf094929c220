"""What a worker's log says of its Redis (its broker too) killed and restarted under running responses.

A real Celery worker process and a real redis-server, killed (SIGKILL) under two streaming responses and
started again 7 s later; the log read is the worker's own (JSON lines), from the kill on. Celery's consumer's
lines stay Celery's words, its reconnect count with them, as one WARNING line each; the worker tells the
outage once (``outage_log.py``). The consumer tries every second (``consumer.py``), its lines folded.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib
from celery.worker.consumer.consumer import CONNECTION_ERROR
from support import MODEL
from support.servers import start_redis
from support.streams import wait_for_end, wait_for_event
from support.workers import accept, worker_on_own_redis

from oss_responses.outage_log import REMIND_SECONDS, OutageLog
from oss_responses.workers.broker_log import CONSUMER_LOGGER, ConsumerReconnectFilter
from oss_responses.workers.celery_app import enqueue, make_celery

DOWN_SECONDS = 7.0  # Celery's own tries, 2 then 4 then 6 s apart, would connect 5 s after Redis is back

Line = dict[str, Any]


@pytest.fixture(scope="module")
def restart_log(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Line]]:
    """The worker's log lines from Redis's kill until both responses ended, taken over after the restart."""
    tmp_path = tmp_path_factory.mktemp("broker-log")
    database = tmp_path / "oss-responses.db"
    shutil.copyfile(sqlite_template, database)
    with worker_on_own_redis(f"sqlite:///{database}", tmp_path, "broker-log", scripted_tokens_per_second=40.0,
                             lease_seconds=5.0, reaper_interval_seconds=0.5) as own:
        response_ids = [accept(own.db, own.redis, own.settings, input="tokens 400", background=True)
                        for _ in range(2)]
        for response_id in response_ids:
            enqueue(make_celery(own.settings), own.settings, response_id, MODEL)
        for response_id in response_ids:
            wait_for_event(own.redis, response_id, "response.output_text.delta")
        since = own.worker.log.stat().st_size
        own.server.kill()
        time.sleep(DOWN_SECONDS)
        own.server.restart()
        for response_id in response_ids:
            wait_for_end(own.redis, response_id, timeout=90)
    log = own.worker.log  # read once the worker stopped: its stop's lines too
    yield [json.loads(line) for line in log.read_bytes()[since:].decode().splitlines()]


def _consumer_tries(lines: list[Line]) -> list[Line]:
    return [line for line in lines if line["logger"] == CONSUMER_LOGGER and "Cannot connect" in line["message"]]


def test_log_redis_restart_without_error_or_traceback(restart_log: list[Line]) -> None:
    # Celery's consumer logged an ERROR per reconnect try (two in a 3 s restart).
    assert [line for line in restart_log if line["level"] in ("ERROR", "CRITICAL") or "exc_info" in line] == []


def test_tell_each_running_response_of_redis_restart_in_one_warning(restart_log: list[Line]) -> None:
    # Four each, of one loss: the run left to a takeover, the reaper's dispatch, the span written anew (the run's
    # last append that missed Redis) and the takeover. A worker running 128 responses wrote 512 WARNING lines.
    warned = [line["message"] for line in restart_log if line["level"] == "WARNING" and "resp_" in line["message"]]
    response_ids = {word.strip(":()") for message in warned for word in message.split() if word.startswith("resp_")}
    assert len(response_ids) == 2, warned
    for response_id in response_ids:
        assert [message for message in warned if response_id in message] == [
            f"{response_id} lost its worker: dispatching its takeover"], warned
    assert sum("taking over" in line["message"] for line in restart_log) == 2  # told, at INFO


def test_tell_consumer_reconnect_tries_in_celery_words_one_line_each(restart_log: list[Line]) -> None:
    # Each had been three lines: the error, "Trying again in 2.00 seconds... (1/100)", an empty one.
    tries = _consumer_tries(restart_log)
    assert [line["level"] for line in tries] == ["WARNING"], restart_log  # the first try; the others folded
    # About every second, each worker at its own interval (workers/consumer.py)
    assert re.search(r"Connection refused\. Trying again in 1\.\d\d seconds?\.\.\. \(1/2800\)", tries[0]["message"])
    assert [line for line in tries if "\n" in line["message"]] == []


def test_consumer_connects_again_within_seconds_of_redis_answering(restart_log: list[Line]) -> None:
    answered = next(line for line in restart_log if line["message"].startswith("Redis answers again"))
    connected = next(line for line in restart_log
                     if line["logger"] == "celery.worker.consumer.connection" and "Connected to" in line["message"])
    assert _seconds(connected) - _seconds(answered) < 2.5


def _seconds(line: Line) -> float:
    return datetime.fromisoformat(line["time"]).timestamp()


def _try_record(retries: int) -> logging.LogRecord:
    return logging.getLogger(CONSUMER_LOGGER).makeRecord(
        CONSUMER_LOGGER, logging.ERROR, __file__, 0, CONNECTION_ERROR,
        ("redis://127.0.0.1:1/0", ConnectionError("refused"), f"Trying again in 1.00 second... ({retries}/2800)"), None)


def test_fold_consumer_tries_to_first_of_outage_and_one_per_reminder() -> None:
    now = [0.0]
    shown = ConsumerReconnectFilter(lambda: None, clock=lambda: now[0])
    seen = []
    for second in [*range(int(REMIND_SECONDS) + 2), 60, 61]:  # a second outage begins at 60
        now[0] = float(second)
        if shown.filter(_try_record(second + 1)):
            seen.append(second)
    assert seen == [0, int(REMIND_SECONDS), 60]


def test_log_no_cancel_notice_at_broker_reconnect(restart_log: list[Line]) -> None:
    # Celery repeated its notice of worker_cancel_long_running_tasks_on_connection_loss's Celery 6 default at
    # each reconnect, six lines, although the app sets it.
    assert [line for line in restart_log if line["logger"] == "py.warnings"] == []


def test_count_consumer_reconnect_try_in_redis_outage(caplog: pytest.LogCaptureFixture) -> None:
    # The consumer's try, refused by a Redis that is down, is a try of the worker's Redis outage: the first
    # starts its story, and its end counts them.
    server = start_redis()
    client = redis_lib.Redis(port=server.port)
    server.kill()
    try:
        with pytest.raises(redis_lib.ConnectionError) as refused:
            client.ping()
        outage = OutageLog(logging.getLogger("test.outage"), "Redis")
        record = logging.getLogger(CONSUMER_LOGGER).makeRecord(
            CONSUMER_LOGGER, logging.ERROR, __file__, 0, CONNECTION_ERROR,
            ("redis://127.0.0.1:1/0", refused.value, "Trying again in 2.00 seconds... (1/100)"), None)
        caplog.set_level(logging.WARNING, logger="test.outage")
        assert ConsumerReconnectFilter(lambda: outage).filter(record)
        assert caplog.messages == [f"Redis unreachable (ConnectionError: {refused.value}); retrying until it answers"]
        assert (record.levelname, record.getMessage()) == (
            "WARNING", f"consumer: Cannot connect to redis://127.0.0.1:1/0: {str(refused.value).rstrip('.')}. "
            "Trying again in 2.00 seconds... (1/100)")
    finally:
        client.close()
        server.stop()
