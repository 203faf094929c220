"""A response outlives the worker running it: SIGKILL (takeover from the journal), SIGTERM (handoff),
a Redis crash and restart (with AOF: the worker leaves the response, and takes it over again), and a
PostgreSQL restart (the worker retries its save, or the start of a task that met the database down).

Real Celery worker processes on a real redis-server, the scripted engine at a fixed speed. For every
response: one contiguous stream with a single terminal event, the same item ids throughout, the final
object equal to SQL's, and the same text as an uninterrupted run of the same request.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis as redis_lib
from support import MODEL
from support.mcp import MISBEHAVING, mcp_server
from support.processes import WorkerProcess, ready_workers, start_api_process, stop_process
from support.servers import PostgresCluster, start_postgres
from support.streams import (
    assert_one_story,
    events_of,
    is_closed,
    story_text,
    stream_entries,
    wait_for_end,
    wait_for_event,
)
from support.workers import accept, worker_on_own_redis, worker_settings

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.eventlog.writer import REPLY_SECONDS
from oss_responses.storage import Database, delete_response, get_response, migrate
from oss_responses.workers.celery_app import enqueue, make_celery

TAKEOVER_SETTINGS: dict[str, Any] = {"scripted_tokens_per_second": 40.0, "lease_seconds": 1.5,
                                     "reaper_interval_seconds": 0.3}


def _takeover_settings(database_url: str, redis_url: str) -> Settings:
    return worker_settings(database_url, redis_url, **TAKEOVER_SETTINGS)


def _unpaced(settings: Settings) -> Settings:
    """For the worker that takes a response over: what is tested happened before it, so it need not keep
    the scripted pace that held the response open until then (the rest of 400 tokens took ~9 s at it)."""
    return settings.model_copy(update={"scripted_tokens_per_second": 0.0})


def _start_response(db: Database, redis: redis_lib.Redis, settings: Settings, text: str) -> str:
    response_id = accept(db, redis, settings, input=text, background=True)
    enqueue(make_celery(settings), settings, response_id, MODEL)
    return response_id


def _wait_for_deltas(redis: redis_lib.Redis, response_id: str, count: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        wait_for_event(redis, response_id, "response.output_text.delta", timeout=timeout)
        if len([e for e in events_of(redis, response_id) if e["type"] == "response.output_text.delta"]) >= count:
            return
        time.sleep(0.05)
    raise TimeoutError(f"fewer than {count} deltas for {response_id}")


def _kill_for_a_survivor(doomed: WorkerProcess, settings: Settings, start_worker: Any) -> None:
    """SIGKILL the worker running the response, and start the one that takes it over."""
    os.kill(doomed.process.pid, signal.SIGKILL)
    doomed.process.wait()
    start_worker(_unpaced(settings), "survivor")


def test_sigkilled_worker_response_is_continued_by_another_worker(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    settings = _takeover_settings(database_url, redis_url)
    db = Database(settings.database_url)
    doomed = start_worker(settings, "doomed")
    response_id = _start_response(db, redis, settings, "tokens 80")
    _wait_for_deltas(redis, response_id, 10)
    _kill_for_a_survivor(doomed, settings, start_worker)
    events = wait_for_end(redis, response_id, timeout=30)
    assert_one_story(events, db, response_id)
    uninterrupted = wait_for_end(redis, _start_response(db, redis, settings, "tokens 80"), timeout=30)
    assert story_text(events) == story_text(uninterrupted) and len(story_text(events).split()) == 80
    db.dispose()


def _continuation_lost_with_earlier_turn_deleted(db, redis, settings, start_worker, **options):  # type: ignore[no-untyped-def]
    """A response continuing a finished one, its worker SIGKILLed mid-answer after that earlier turn was deleted,
    a surviving worker started: the continuation's id."""
    doomed = start_worker(settings, "doomed")
    first = _start_response(db, redis, settings, "hi")
    wait_for_end(redis, first, timeout=30)
    second = accept(db, redis, settings, input="tokens 80", previous_response_id=first, **options)
    enqueue(make_celery(settings), settings, second, MODEL)
    _wait_for_deltas(redis, second, 10)
    db.run(delete_response, first)
    _kill_for_a_survivor(doomed, settings, start_worker)
    return second


def test_sigkilled_worker_response_whose_earlier_turn_was_deleted_since_fails_after_its_events(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    # Its takeover cannot load it (the chain is cut): it ends, failed, after what its lost worker wrote. It
    # failed from its start instead, at sequence numbers the stream held: Redis refused that, and it was
    # taken over again, about once a second, for good (the multi-replica probe: 358 takeovers of one).
    settings = _takeover_settings(database_url, redis_url)
    db = Database(settings.database_url)
    second = _continuation_lost_with_earlier_turn_deleted(db, redis, settings, start_worker, background=True)

    events = wait_for_end(redis, second, timeout=30)

    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.failed"
    error = db.run(get_response, second).error
    assert error is not None and error["code"] == "invalid_prompt" and "was deleted" in error["message"]
    assert int(redis.get(redis_keys.takeovers(second)) or 0) == 1
    db.dispose()


def test_sigkilled_worker_unstored_response_failed_by_its_takeover_keeps_stream_for_unstored_ttl(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    """A ``store: false`` response's stream, its whole output, is kept ``unstored_event_ttl_seconds`` after its
    end (no route reads it). Failed by its takeover (its earlier turn deleted since), it was kept for the
    event TTL of a stored response's: a day, not five minutes."""
    settings = _takeover_settings(database_url, redis_url)
    db = Database(settings.database_url)
    second = _continuation_lost_with_earlier_turn_deleted(db, redis, settings, start_worker, store=False)

    events = wait_for_end(redis, second, timeout=30)

    assert events[-1]["type"] == "response.failed" and db.run(get_response, second) is None
    assert 0 < redis.ttl(redis_keys.events(second)) <= settings.unstored_event_ttl_seconds
    db.dispose()


def test_sigkilled_worker_response_deleted_before_its_takeover_leaves_no_events(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A DELETE of a running response drops its events (its prompt and output) once its stream ends. With its
    worker gone, no worker ends it: the reaper closes the stream of the row gone, and it kept the whole stream,
    response.created's instructions and input and every delta, for the event TTL (a day)."""
    settings = _takeover_settings(database_url, redis_url)
    db = Database(settings.database_url)
    api, base_url = start_api_process(settings, tmp_path / "api.log")
    try:
        doomed = start_worker(settings, "doomed")
        response_id = _start_response(db, redis, settings, "tokens 80")
        _wait_for_deltas(redis, response_id, 10)
        os.kill(doomed.process.pid, signal.SIGKILL)
        doomed.process.wait()
        assert httpx2.delete(f"{base_url}/v1/responses/{response_id}").status_code == 200
        start_worker(_unpaced(settings), "survivor")  # its reaper ends the stream once the lease expired

        # The end marker first, then the events' drop: read only the stream (its events, once ended, may
        # already be gone, which is what is tested).
        deadline = time.monotonic() + 40
        while not (is_closed(redis, response_id) and len(stream_entries(redis, response_id)) == 1):
            assert time.monotonic() < deadline, f"the stream of {response_id} was not ended and dropped"
            time.sleep(0.1)

        [(_, end)] = stream_entries(redis, response_id)
        assert end == {b"end": b"failed", b"archived": b"-1"}
        assert redis.ttl(redis_keys.events(response_id)) > 0 and not redis.exists(redis_keys.journal(response_id))
    finally:
        stop_process(api)
        db.dispose()


def _wait_for_lease_of(redis: redis_lib.Redis, response_id: str, pid: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while (holder := redis.get(redis_keys.lease(response_id))) is None or f":{pid}:" not in holder.decode():
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker {pid} did not take {response_id} (lease: {holder!r})")
        time.sleep(0.05)


def test_worker_paused_past_its_lease_writes_nothing_once_another_took_over(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    # A worker paused past its lease (SIGSTOP here; a frozen VM, a long stall) resumes with an engine step
    # on its way. Whatever it writes then must not land: its journal step would sit among the new owner's,
    # and the next takeover (its owner killed) would replay it into the text.
    settings = _takeover_settings(database_url, redis_url)
    db = Database(settings.database_url)
    paused = start_worker(settings, "paused")
    response_id = _start_response(db, redis, settings, "tokens 200")
    _wait_for_deltas(redis, response_id, 10)
    os.kill(paused.process.pid, signal.SIGSTOP)
    second = start_worker(settings, "second")
    _wait_for_lease_of(redis, response_id, second.process.pid)
    _wait_for_deltas(redis, response_id, 30)
    os.kill(paused.process.pid, signal.SIGCONT)
    time.sleep(2.0)  # its buffered step is written, its lease renewal fails
    os.kill(second.process.pid, signal.SIGKILL)
    second.process.wait()
    events = wait_for_end(redis, response_id, timeout=60)  # taken over again, by the resumed worker
    assert_one_story(events, db, response_id)
    uninterrupted = wait_for_end(redis, _start_response(db, redis, settings, "tokens 200"), timeout=60)
    assert story_text(events) == story_text(uninterrupted) and len(story_text(events).split()) == 200
    db.dispose()


def test_sigtermed_worker_hands_running_response_to_another_worker(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    log_text = _stop_while_running(database_url, redis_url, redis, start_worker,
                                   lambda leaving: leaving.process.send_signal(signal.SIGTERM))
    assert "handing off 1 running responses" in log_text


def test_worker_shut_down_by_celery_control_hands_running_response_to_another_worker(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    """``celery control shutdown`` sends no ``worker_shutting_down``: the engine step's stop hands off."""
    settings = _takeover_settings(database_url, redis_url)
    log_text = _stop_while_running(
        database_url, redis_url, redis, start_worker,
        lambda leaving: make_celery(settings).control.shutdown(destination=[f"leaving@{socket.gethostname()}"]),
        fork=False,  # a boot order of its own (see test_celery_worker)
    )
    assert "handed_off" in log_text


def test_worker_sent_sigquit_hands_running_response_to_another_worker(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    """Celery's cold shutdown stops the pool before it sends ``worker_shutting_down``: the threads pool
    waited there for every running response to end (or, before the pool was ours, failed with a CRITICAL
    ``NotImplementedError``)."""
    log_text = _stop_while_running(database_url, redis_url, redis, start_worker,
                                   lambda leaving: leaving.process.send_signal(signal.SIGQUIT))
    assert "handed_off" in log_text and "CRITICAL" not in log_text


def _stop_while_running(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker: Any,
    stop: Callable[[WorkerProcess], object], *, fork: bool = True,
) -> str:
    """A worker stopped by ``stop`` while it generates: its response goes on elsewhere, whole, and it
    exits within 5 s. Its log."""
    settings = _takeover_settings(database_url, redis_url)
    db = Database(settings.database_url)
    leaving = start_worker(settings, "leaving", fork=fork)
    response_id = _start_response(db, redis, settings, "tokens 400")
    _wait_for_deltas(redis, response_id, 10)
    start_worker(_unpaced(settings), "staying")
    signalled = time.monotonic()
    stop(leaving)
    leaving.process.wait(timeout=30)
    exited_after = time.monotonic() - signalled
    events = wait_for_end(redis, response_id, timeout=30)
    assert_one_story(events, db, response_id)
    assert len(story_text(events).split()) == 400
    assert exited_after < 5, f"the worker took {exited_after:.1f}s to exit"
    db.dispose()
    return str(leaving.log.read_text())


def test_response_goes_on_after_redis_is_killed_and_restarted(database_url: str, tmp_path: Path) -> None:
    with worker_on_own_redis(database_url, tmp_path, "through-restart", **TAKEOVER_SETTINGS) as own:
        response_id = _start_response(own.db, own.redis, own.settings, "tokens 200")
        _wait_for_deltas(own.redis, response_id, 10)
        own.server.kill()
        time.sleep(1.0)
        own.server.restart()
        events = wait_for_end(own.redis, response_id, timeout=60)
        assert_one_story(events, own.db, response_id)
        assert len(story_text(events).split()) == 200
        assert own.worker.process.poll() is None, "the worker died with its broker connection (broker.py)"


def test_responses_complete_intact_after_redis_freezes_past_writer_reply_limit(
    sqlite_template: Path, tmp_path: Path
) -> None:
    # Redis frozen (SIGSTOP: its connections open, nothing answered) longer than the event writer waits for a
    # reply and shorter than a lease: the worker gives its writes up and leaves its runs to takeovers while
    # their leases still hold. A run's events buffered behind the lost flush were sent on the writer's next
    # connection all the same, after a gap (a stream 0..50 then 410), and every takeover's writes were refused
    # (XADD id not above the top) until the response failed, "not valid harmony".
    database = tmp_path / "oss-responses.db"
    shutil.copyfile(sqlite_template, database)
    with worker_on_own_redis(f"sqlite:///{database}", tmp_path, "through-freeze", scripted_tokens_per_second=40.0,
                             lease_seconds=REPLY_SECONDS + 5.0, reaper_interval_seconds=1.0) as own:
        response_ids = [_start_response(own.db, own.redis, own.settings, "tokens 600") for _ in range(2)]
        for response_id in response_ids:
            _wait_for_deltas(own.redis, response_id, 5)
        os.kill(own.server.process.pid, signal.SIGSTOP)
        try:
            time.sleep(REPLY_SECONDS + 3.0)
        finally:
            os.kill(own.server.process.pid, signal.SIGCONT)
        for response_id in response_ids:
            events = wait_for_end(own.redis, response_id, timeout=90)
            assert_one_story(events, own.db, response_id)
            assert len(story_text(events).split()) == 600


@contextmanager
def _worker_on_own_postgres(
    redis_url: str, redis: redis_lib.Redis, tmp_path: Path, name: str, *, paced: bool = True
) -> Iterator[tuple[PostgresCluster, Settings, Database, WorkerProcess]]:
    """A ready worker on a PostgreSQL cluster of the test's own, which the test restarts."""
    cluster = start_postgres()
    worker = None
    try:
        database_url = cluster.create_database(f"oss_{name.replace('-', '_')}")
        migrate(database_url)
        settings = _takeover_settings(database_url, redis_url)
        settings = settings if paced else _unpaced(settings)
        db = Database(settings.database_url)
        worker = WorkerProcess(settings, name, tmp_path)
        worker.wait_ready(redis, ready_workers(redis))
        yield cluster, settings, db, worker
        db.dispose()
    finally:
        if worker is not None:
            worker.stop()
        cluster.stop()


def test_response_is_saved_through_postgresql_restart(redis_url: str, redis: redis_lib.Redis, tmp_path: Path) -> None:
    with _worker_on_own_postgres(redis_url, redis, tmp_path, "through-pg-restart") as (cluster, settings, db, worker):
        response_id = _start_response(db, redis, settings, "tokens 120")
        _wait_for_deltas(redis, response_id, 10)
        cluster.restart(down_seconds=4.0)  # the response ends, and is saved, while the database is down
        events = wait_for_end(redis, response_id, timeout=60)
        assert_one_story(events, db, response_id)
        assert "retrying" in worker.log.read_text()


def test_save_through_postgresql_restart_logs_response_once_without_traceback(
    redis_url: str, redis: redis_lib.Redis, tmp_path: Path
) -> None:
    # Each save retry logged a line (5 in an 8 s restart), the reaper a line a pass (a second).
    with _worker_on_own_postgres(redis_url, redis, tmp_path, "save-lines") as (cluster, settings, db, worker):
        response_id = _start_response(db, redis, settings, "tokens 60")
        _wait_for_deltas(redis, response_id, 10)
        cluster.restart(down_seconds=4.0)  # the response ends while the database is down
        wait_for_end(redis, response_id, timeout=60)
        text = worker.log.read_text()
    assert "Traceback" not in text
    assert text.count(f"saving {response_id} failed") == 1
    assert text.count("the database unreachable") == 1 and text.count("the database answers again") == 1


def test_response_whose_task_starts_while_postgresql_is_down_runs_once_it_is_back(
    redis_url: str, redis: redis_lib.Redis, tmp_path: Path
) -> None:
    with _worker_on_own_postgres(redis_url, redis, tmp_path, "down-at-start", paced=False) as (
        cluster, settings, db, worker
    ):
        response_id = _sent_with_database_down(cluster, db, redis, settings)
        time.sleep(2.0)
        cluster.start_again()
        events = wait_for_end(redis, response_id, timeout=30)
        assert_one_story(events, db, response_id)
        assert "a store did not answer" in worker.log.read_text()


def test_task_waiting_for_postgresql_goes_back_to_the_queue_when_its_worker_stops(
    redis_url: str, redis: redis_lib.Redis, tmp_path: Path
) -> None:
    with _worker_on_own_postgres(redis_url, redis, tmp_path, "stopped-waiting", paced=False) as (
        cluster, settings, db, worker
    ):
        response_id = _sent_with_database_down(cluster, db, redis, settings)
        _wait_for_log(worker, "a store did not answer")
        worker.stop()  # SIGTERM while its task waits for the database
        assert "its task goes back to the queue" in worker.log.read_text()
        cluster.start_again()
        successor = WorkerProcess(settings, "successor", tmp_path)
        try:
            successor.wait_ready(redis, ready_workers(redis))
            events = wait_for_end(redis, response_id, timeout=30)
            assert_one_story(events, db, response_id)
        finally:
            successor.stop()


def _sent_with_database_down(cluster: PostgresCluster, db: Database, redis: redis_lib.Redis, settings: Settings) -> str:
    """A response accepted, then its task sent once the database is down: the task starts without it."""
    response_id = accept(db, redis, settings, input="tokens 30", background=True)
    cluster.shut_down()
    enqueue(make_celery(settings), settings, response_id, MODEL)
    return response_id


def _wait_for_log(worker: WorkerProcess, text: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in worker.log.read_text():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{text!r} not in {worker.log}")
        time.sleep(0.05)


def _tool_call_killed_at(
    settings: Settings, redis: redis_lib.Redis, start_worker, label: str, call: str, killed_after: str  # type: ignore[no-untyped-def]
) -> list[dict[str, Any]]:
    """A response calling ``call`` on MCP server ``label``: its worker SIGKILLed once ``killed_after`` is in
    the stream, another worker started; the whole stream, checked as one story."""
    db = Database(settings.database_url)
    doomed = start_worker(settings, "doomed")
    tools = [{"type": "mcp", "server_label": label, "require_approval": "never"}]
    response_id = accept(db, redis, settings, input=f"call {label}.{call}", tools=tools, background=True)
    enqueue(make_celery(settings), settings, response_id, MODEL)
    wait_for_event(redis, response_id, killed_after)
    _kill_for_a_survivor(doomed, settings, start_worker)
    events = wait_for_end(redis, response_id, timeout=30)
    assert_one_story(events, db, response_id)
    db.dispose()
    return events


def _mcp_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["item"] for e in events if e["type"] == "response.output_item.done" and e["item"]["type"] == "mcp_call"]


@pytest.mark.parametrize(
    "killed_after", ["response.mcp_list_tools.completed", "response.mcp_call.completed"],
    ids=["after tool listing", "between turns"],
)
def test_sigkilled_worker_tool_turn_is_continued_by_another_worker(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker, calculator_url: str, killed_after: str
) -> None:  # type: ignore[no-untyped-def]
    settings = _takeover_settings(database_url, redis_url).model_copy(update={"tool_servers": {"calc": calculator_url}})
    events = _tool_call_killed_at(settings, redis, start_worker, "calc", 'calculate {"expression": "6*7"}',
                                  killed_after)
    assert [e["type"] for e in events].count("response.mcp_list_tools.completed") == 1
    assert [call["output"] for call in _mcp_calls(events)] == ["42"]
    assert story_text(events) == "The tool calc.calculate returned: 42"


@pytest.mark.parametrize("idempotent", [False, True], ids=["not idempotent", "idempotent"])
def test_sigkilled_worker_mid_tool_call_is_taken_over(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker, misbehaving_url: str, idempotent: bool
) -> None:  # type: ignore[no-untyped-def]
    """Killed while its MCP call runs: an idempotent tool is called again; any other call fails, saying
    the worker stopped before it answered, and the model goes on. Either way one story, ending completed."""
    settings = _takeover_settings(database_url, redis_url).model_copy(update={
        "tool_servers": {"slow": misbehaving_url}, "idempotent_tools": ["slow.sleep"] if idempotent else [],
    })
    events = _tool_call_killed_at(settings, redis, start_worker, "slow", 'sleep {"seconds": 2}',
                                  "response.mcp_call_arguments.done")
    [call] = _mcp_calls(events)
    if idempotent:
        assert call["output"] == "awake" and call["error"] is None, call
    else:
        assert call["output"] is None and "stopped before it answered" in str(call["error"])


def test_sigkilled_worker_during_tool_listing_is_taken_over(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    """Killed while it lists an MCP server's tools (a listing that takes a second): the new worker lists
    them again, and the stream holds one listing, completed once, then the call and the answer."""
    with mcp_server(*MISBEHAVING, "--list-delay", "1.0") as slow_listing_url:
        settings = _takeover_settings(database_url, redis_url).model_copy(
            update={"tool_servers": {"slow": slow_listing_url}}
        )
        events = _tool_call_killed_at(settings, redis, start_worker, "slow", 'sleep {"seconds": 0}',
                                      "response.mcp_list_tools.in_progress")
    types = [e["type"] for e in events]
    assert types.count("response.mcp_list_tools.in_progress") == types.count("response.mcp_list_tools.completed") == 1
    assert story_text(events) == "The tool slow.sleep returned: awake"
