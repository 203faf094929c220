"""Redis lost while a response ends: every stream still ends, and says what SQL says.

An in-process worker on a redis-server of its own (AOF, fsync always: a restart keeps every write
Redis acknowledged), killed at the exact moment under test by a hook on the worker's event writer:
as the terminal event is buffered (the turn's last flush never reaches Redis), or as the stream's end
marker is (the turn is saved, its stream not closed). Redis is then started again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis as redis_lib
from support.servers import RedisServer, start_redis
from support.streams import assert_one_story, events_of, is_closed, story_text, wait_for_end
from support.workers import accept, worker_settings

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.storage import Database, get_event_log, get_response
from oss_responses.workers import on_loop, runner
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.reaper import Reaper
from oss_responses.workers.testing import local_worker, run_response_now

LEASE_SECONDS = 1.0


@pytest.fixture
def server() -> Iterator[RedisServer]:
    started = start_redis(appendonly=True)
    yield started
    started.stop()


@pytest.fixture
def settings(database_url: str, server: RedisServer) -> Settings:
    return worker_settings(database_url, server.url, lease_seconds=LEASE_SECONDS)


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis_lib.Redis]:
    connection = redis_lib.Redis.from_url(server.url)
    yield connection
    connection.close()


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    database = Database(settings.database_url)
    yield database
    database.dispose()


def kill_redis_when(worker: WorkerContext, server: RedisServer, method: str, happens: Callable[..., bool]) -> None:
    """SIGKILL redis-server (on the engine loop, before the writer buffers it) the first time the
    writer's ``method`` is called with arguments for which ``happens`` is true."""
    original = getattr(worker.writer, method)
    killed = False

    def hooked(*args: Any, **kwargs: Any) -> Any:
        nonlocal killed
        if not killed and happens(*args):
            killed = True
            server.kill()
        return original(*args, **kwargs)

    setattr(worker.writer, method, hooked)


def has_terminal_event(_: str, events: Any) -> bool:
    return any(event.type == "response.completed" for event in events)


def wait_until_gone(client: redis_lib.Redis, key: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while client.exists(key):
        assert time.monotonic() < deadline, f"{key} still exists after {timeout}s"
        time.sleep(0.05)


def reaper(db: Database, client: redis_lib.Redis) -> Reaper:
    return Reaper(db, client, worker_id="test", interval_seconds=0.5, lease_seconds=LEASE_SECONDS,
                  event_ttl_seconds=600)


def test_response_whose_last_events_missed_redis_is_left_to_a_takeover(
    settings: Settings, server: RedisServer, client: redis_lib.Redis, db: Database
) -> None:
    response_id = accept(db, client, settings, input="tokens 30", background=True)
    with local_worker(settings) as worker:
        kill_redis_when(worker, server, "append", has_terminal_event)
        assert run_response_now(response_id, worker=worker) == "lease_lost"
        record = db.run(get_response, response_id)
        assert record is not None and record.status == "in_progress", "saved though its stream lacks its end"
        server.restart()
        wait_until_gone(client, redis_keys.lease(response_id))
        assert run_response_now(response_id, worker=worker) == "completed"
    events = wait_for_end(client, response_id, timeout=10)
    assert_one_story(events, db, response_id)
    assert len(story_text(events).split()) == 30


def test_lease_whose_release_redis_missed_is_released_by_next_reaper_pass(
    database_url: str, server: RedisServer, client: redis_lib.Redis, db: Database
) -> None:
    # Its lease would have held the response for a minute after Redis came back: the takeover waited for it.
    settings = worker_settings(database_url, server.url, lease_seconds=60.0)
    response_id = accept(db, client, settings, input="tokens 30", background=True)
    with local_worker(settings) as worker:
        kill_redis_when(worker, server, "append", is_delta_from(10))
        assert run_response_now(response_id, worker=worker) == "lease_lost"
        server.restart()
        assert client.exists(redis_keys.lease(response_id))
        dispatched: list[str] = []
        Reaper(db, client, worker_id="test", interval_seconds=0.5, lease_seconds=60.0, event_ttl_seconds=600,
               dispatch=lambda response, *_: dispatched.append(response), unreleased=worker.unreleased).reap_once()
        assert dispatched == [response_id]
        assert run_response_now(response_id, worker=worker) == "completed"
    events = wait_for_end(client, response_id, timeout=10)
    assert_one_story(events, db, response_id)
    assert len(story_text(events).split()) == 30


def test_stream_of_response_saved_while_redis_was_down_is_closed_by_reaper(
    settings: Settings, server: RedisServer, client: redis_lib.Redis, db: Database
) -> None:
    response_id = accept(db, client, settings, input="tokens 30", background=True)
    with local_worker(settings) as worker:
        kill_redis_when(worker, server, "close", lambda *_: True)
        assert run_response_now(response_id, worker=worker) == "completed"
    server.restart()
    assert not is_closed(client, response_id)
    wait_until_gone(client, redis_keys.lease(response_id))
    reaper(db, client).reap_once()
    events = wait_for_end(client, response_id, timeout=5)
    assert_one_story(events, db, response_id)
    assert len(story_text(events).split()) == 30
    assert db.run(get_event_log, response_id) is not None, "the closed stream was not archived"
    assert events_of(client, response_id) == events


def is_delta_from(number: int) -> Callable[[str, Any], bool]:
    return lambda _, events: any(e.type == "response.output_text.delta" and e.sequence_number >= number for e in events)


def test_takeover_of_stream_restored_shorter_marks_the_events_it_writes_anew(database_url: str) -> None:
    """Redis restored from a snapshot taken while the response ran: its stream and journal come back shorter than
    its lost run had numbered them, and the takeover writes those numbers anew (with sampling, other events). The
    lost run recorded its last number in SQL; the takeover marks the span before it writes, for readers who saw
    the old events (``eventlog/rewinds.py``)."""
    server = start_redis()  # no AOF: a restart loads the snapshot SAVE wrote
    try:
        settings = worker_settings(database_url, server.url, lease_seconds=LEASE_SECONDS)
        client = redis_lib.Redis.from_url(server.url)
        db = Database(settings.database_url)
        response_id = accept(db, client, settings, input="tokens 30", background=True)
        with local_worker(settings) as worker:
            original = worker.writer.append
            kill_redis_when(worker, server, "append", is_delta_from(20))
            snapshot = worker.writer.append
            saved = False

            def save_then_append(response: str, events: Any) -> Any:
                nonlocal saved
                events = list(events)
                if not saved and is_delta_from(10)(response, events):
                    saved = client.save()
                return snapshot(response, events)

            worker.writer.append = save_then_append  # type: ignore[method-assign]
            assert run_response_now(response_id, worker=worker) == "lease_lost"
            server.restart()
            wait_until_gone(client, redis_keys.lease(response_id))
            worker.writer.append = original  # type: ignore[method-assign]
            assert run_response_now(response_id, worker=worker) == "completed"
        first, _, last = client.get(redis_keys.rewound(response_id)).partition(b" ")
        assert int(first) <= 20 <= int(last), "the lost run numbered past 20, the snapshot held less"
        client.close()
        db.dispose()
    finally:
        server.stop()


def test_failure_that_missed_redis_is_logged_in_one_line_and_left_to_a_takeover(
    settings: Settings, server: RedisServer, client: redis_lib.Redis, db: Database, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Redis dies as the response starts and its writer's flush fails; then the request's own failure (its
    # prompt exceeds the context) cannot be written: an outage, not a bug, so one WARNING without a
    # traceback. The takeover writes the same failure once Redis is back.
    async def generate_then_flush(run: Any, request: Any) -> None:
        try:
            await on_loop.generate(run, request)
        finally:  # the failed flush settles before the failure is written: its append is refused
            await run.ctx.writer.flush()

    monkeypatch.setattr(runner, "generate", generate_then_flush)
    small = settings.model_copy(update={"scripted_context_tokens": 800})
    response_id = accept(db, client, small, input="word " * 900, truncation="disabled", background=True)
    with local_worker(small) as worker:
        kill_redis_when(worker, server, "append", lambda _, events: events[-1].type == "response.in_progress")
        assert run_response_now(response_id, worker=worker) == "lease_lost"
        unwritten = [r for r in caplog.records if "could not be written to its stream" in r.getMessage()]
        assert [(r.levelname, bool(r.exc_info)) for r in unwritten] == [("WARNING", False)]
        server.restart()
        wait_until_gone(client, redis_keys.lease(response_id))
        assert run_response_now(response_id, worker=worker) == "failed"
    events = wait_for_end(client, response_id, timeout=10)
    kinds = ["created", "queued", "in_progress", "failed"]
    assert [e["type"] for e in events] == [f"response.{kind}" for kind in kinds]
    assert events[-1]["response"]["error"]["code"] == "context_length_exceeded"
