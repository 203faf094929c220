"""A worker that stops (Celery stops its engine step before its pool): every task thread still
running hands its response off and ends before the engine loop stops under it, and none waits forever
on a loop that stopped. A task that had not started its run (its prompt rendering: on a stopped tokenizer
child, that outlasts the stop's wait) hands its response back still queued, not counted as a loss."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis as redis_lib
from redis.exceptions import ConnectionError as RedisConnectionError
from support.servers import RedisServer
from support.streams import wait_for_event
from support.tool_turns import CALC, tool_settings
from support.workers import accept, accept_with_secrets, worker_settings

from oss_responses import prompt_tokenizer, redis_keys
from oss_responses.config import Settings
from oss_responses.storage import Database, get_response
from oss_responses.workers import runner, takeover
from oss_responses.workers.context import WorkerContext, start_worker
from oss_responses.workers.engine_loop import EngineLoop
from oss_responses.workers.prompting import render_early
from oss_responses.workers.run_state import Outcome
from oss_responses.workers.testing import run_response_now


def _run_as_task(ctx: WorkerContext, response_id: str, secrets: dict[str, Any] | None = None) -> Outcome:
    with ctx.task():  # as the Celery task body does
        return run_response_now(response_id, worker=ctx, secrets=secrets)


def test_stop_worker_waits_for_running_task_to_hand_off(
    database_url: str, redis_url: str, redis: redis_lib.Redis
) -> None:
    settings = worker_settings(database_url, redis_url, scripted_tokens_per_second=40.0)
    db = Database(settings.database_url)
    response_id = accept(db, redis, settings, input="tokens 400", background=True)
    ctx = start_worker(settings, with_reaper=False)
    with ThreadPoolExecutor(1) as pool:
        task = pool.submit(_run_as_task, ctx, response_id)
        wait_for_event(redis, response_id, "response.output_text.delta")
        ctx.stop()
        assert task.done() and task.result() == "handed_off"
    assert not redis.exists(redis_keys.lease(response_id))  # free for the worker that takes it over
    assert db.run(get_response, response_id).status == "in_progress"  # type: ignore[union-attr]
    db.dispose()


def test_run_response_claimed_after_shutdown_began_is_handed_off(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    worker.hand_off_all()  # nothing runs yet: the response below is claimed after it looked
    response_id = accept(db, redis, settings, input="tokens 400", background=True)
    assert run_response_now(response_id, worker=worker) == "handed_off"
    assert not redis.exists(redis_keys.lease(response_id))


def test_run_response_told_to_stop_while_its_prompt_renders_stays_queued(
    worker: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop arrives while the task thread renders the prompt: the run has not started, so its response
    goes back as it came. It went in_progress first, on an engine loop about to stop."""
    def render_while_the_worker_stops(ctx: WorkerContext, job: Any) -> Any:
        ctx.hand_off_all()
        return render_early(ctx, job)

    monkeypatch.setattr(runner, "render_early", render_while_the_worker_stops)
    response_id = accept(db, redis, settings, input="tokens 40", background=True)
    assert run_response_now(response_id, worker=worker) == "handed_off"
    assert db.run(get_response, response_id).status == "queued"  # type: ignore[union-attr]
    assert not redis.exists(redis_keys.lease(response_id))


def test_run_response_whose_engine_loop_stopped_before_it_started_is_handed_off_uncounted(
    database_url: str, redis_url: str, redis: redis_lib.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop stops between the task's look at the worker and its run (the stop's wait for the task threads
    ran out just then): the run is handed off, marked so that its takeover is not counted. It failed on the
    stopped loop with tracebacks, its lease left to lapse, and the reaper dispatched a counted takeover."""
    settings = worker_settings(database_url, redis_url)
    db = Database(settings.database_url)
    dispatched: list[str] = []
    ctx = start_worker(settings, with_reaper=False, dispatch=lambda rid, model, secrets: dispatched.append(rid))

    def render_then_lose_the_loop(ctx: WorkerContext, job: Any) -> Any:
        rendered = render_early(ctx, job)
        ctx.loop.stop()
        return rendered

    monkeypatch.setattr(runner, "render_early", render_then_lose_the_loop)
    response_id = accept(db, redis, settings, input="tokens 40", background=True)
    try:
        assert run_response_now(response_id, worker=ctx) == "handed_off"
    finally:
        ctx.stop()
    assert_handed_off(redis, response_id, dispatched)
    db.dispose()


LONG_INPUT = "tokens 5 " + " ".join(f"word{i}" for i in range(400))  # tokenised in the child above 100 chars


def test_stop_worker_hands_back_queued_response_waiting_on_stopped_tokenizer_child(
    database_url: str, redis_url: str, redis: redis_lib.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task thread waits on a stopped (SIGSTOP) tokenizer child until the stop kills it, after the engine
    loop is gone. Its response went in_progress, failed on the stopped loop (tracebacks), and its lease
    lapsed: the next worker took it over as a counted loss (``max_takeovers``)."""
    monkeypatch.setattr(prompt_tokenizer, "CHILD_EXIT_SECONDS", 0.5)
    settings = worker_settings(database_url, redis_url, render_process_above_chars=100)
    db = Database(settings.database_url)
    dispatched: list[str] = []
    ctx = start_worker(settings, with_reaper=False, dispatch=lambda rid, model, secrets: dispatched.append(rid))
    assert run_response_now(accept(db, redis, settings, input=LONG_INPUT), worker=ctx) == "completed"  # its child up
    assert ctx.tokenizer._executor is not None
    (child,) = ctx.tokenizer._executor._processes  # type: ignore[union-attr]
    os.kill(child, signal.SIGSTOP)
    response_id = accept(db, redis, settings, input=LONG_INPUT + " again", background=True)
    try:
        with ThreadPoolExecutor(1) as pool:
            task = pool.submit(_run_as_task, ctx, response_id)
            while not redis.exists(redis_keys.lease(response_id)):  # claimed: its prompt goes to the child
                time.sleep(0.05)
            ctx.stop(tasks_timeout=0.5)
            outcome = task.result(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGCONT)
    assert outcome == "handed_off"
    assert db.run(get_response, response_id).status == "queued"  # type: ignore[union-attr]
    assert not redis.exists(redis_keys.lease(response_id))
    assert not redis.exists(redis_keys.takeovers(response_id))
    assert dispatched == [response_id]
    db.dispose()


def test_stop_worker_whose_run_lost_its_lease_unseen_leaves_response_to_its_holder(
    database_url: str, redis_url: str, redis: redis_lib.Redis
) -> None:
    """Another worker took the response over while this run's keeper had not seen it (its renewals timing out on
    a silent link): the stop handed it off all the same, and its mark, on a response the other worker held,
    kept that worker's own loss from being counted and held its takeover back for a minute."""
    settings = worker_settings(database_url, redis_url, scripted_tokens_per_second=4.0)  # quiet between tokens
    db = Database(settings.database_url)
    response_id = accept(db, redis, settings, input="tokens 400", background=True)
    dispatched: list[str] = []
    ctx = start_worker(settings, with_reaper=False, dispatch=lambda rid, model, secrets: dispatched.append(rid))
    with ThreadPoolExecutor(1) as pool:
        task = pool.submit(_run_as_task, ctx, response_id)
        wait_for_event(redis, response_id, "response.output_text.delta")
        redis.set(redis_keys.lease(response_id), "other-worker/0000")  # this run's keeper renews in 20 s
        ctx.stop()
        assert task.result() == "lease_lost"
    assert redis.get(redis_keys.lease(response_id)) == b"other-worker/0000"
    assert not redis.exists(redis_keys.resume(response_id))
    assert dispatched == []
    db.dispose()


def _handed_off_by_a_stop(database_url: str, redis_url: str, redis: redis_lib.Redis, db: Database) -> str:
    """A response a worker's stop handed off mid-generation: in progress, marked a handoff, its lease free."""
    settings = worker_settings(database_url, redis_url, scripted_tokens_per_second=40.0)
    response_id = accept(db, redis, settings, input="tokens 400", background=True)
    ctx = start_worker(settings, with_reaper=False, dispatch=lambda rid, model, secrets: None)
    with ThreadPoolExecutor(1) as pool:
        task = pool.submit(_run_as_task, ctx, response_id)
        wait_for_event(redis, response_id, "response.output_text.delta")
        ctx.stop()
        assert task.result() == "handed_off"
    assert redis.get(redis_keys.resume(response_id)) == b"handoff"
    return response_id


@pytest.mark.parametrize("gone_before", ["its lease's keeper starts", "its journal is read"])
def test_run_response_taking_over_after_engine_loop_stopped_is_handed_off_uncounted(
    database_url: str, redis_url: str, redis: redis_lib.Redis, monkeypatch: pytest.MonkeyPatch, gone_before: str
) -> None:
    """A takeover's task thread goes on after its worker's engine loop stopped (held past the stop's wait):
    the response is handed off again, marked, so that the next takeover is not counted. Its claim consumed the
    handoff mark, the loop's refusal raised (a traceback), its lease was released (or left to lapse), and the
    next worker counted a takeover: deploys could push a response to ``max_takeovers``, then worker_lost."""
    db = Database(database_url)
    response_id = _handed_off_by_a_stop(database_url, redis_url, redis, db)
    settings = worker_settings(database_url, redis_url)
    dispatched: list[str] = []
    ctx = start_worker(settings, with_reaper=False, dispatch=lambda rid, model, secrets: dispatched.append(rid))
    if gone_before == "its lease's keeper starts":
        claimed = runner.claim
        monkeypatch.setattr(runner, "claim", lambda *args: (claimed(*args), ctx.loop.stop())[0])
    else:
        read = takeover.read_journal
        monkeypatch.setattr(takeover, "read_journal", lambda *args: (ctx.loop.stop(), read(*args))[1])
    try:
        assert run_response_now(response_id, worker=ctx) == "handed_off"
    finally:
        ctx.stop()
    assert_handed_off(redis, response_id, dispatched)
    monkeypatch.undo()
    assert run_response_now(response_id, settings) == "completed"
    assert redis.get(redis_keys.takeovers(response_id)) in (None, b"0")
    db.dispose()


def _stopped_child(ctx: WorkerContext) -> int:
    """The worker's tokenizer child (started if need be) with SIGSTOP: a hung child."""
    if ctx.tokenizer._executor is None:
        ctx.tokenizer.tokenize_blocking([{"role": "user", "content": [{"type": "text", "text": LONG_INPUT}]}],
                                        for_completion=True)
    assert ctx.tokenizer._executor is not None
    (child,) = ctx.tokenizer._executor._processes  # type: ignore[union-attr]
    os.kill(child, signal.SIGSTOP)
    return child


def _stop_timed(ctx: WorkerContext, child: int, tasks_timeout: float) -> float:
    """The worker's stop, in seconds; the child let go after, whatever happened."""
    started = time.monotonic()
    try:
        ctx.stop(tasks_timeout=tasks_timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGCONT)
    return time.monotonic() - started


def test_stop_worker_with_stopped_tokenizer_child_ends_without_waiting_for_it(
    database_url: str, redis_url: str, redis: redis_lib.Redis
) -> None:
    """Every run is handed off at the stop, so a prompt still in the child is not used: the child is killed
    at once, and the task thread waiting on it hands its response back. The stop waited for the task threads
    (20 s, here 10) and then for the child (5 s), a deploy's grace period spent on a child it then killed."""
    settings = worker_settings(database_url, redis_url, render_process_above_chars=100)
    db = Database(settings.database_url)
    dispatched: list[str] = []
    ctx = start_worker(settings, with_reaper=False, dispatch=lambda rid, model, secrets: dispatched.append(rid))
    child = _stopped_child(ctx)
    response_id = accept(db, redis, settings, input=LONG_INPUT + " again", background=True)
    with ThreadPoolExecutor(1) as pool:
        task = pool.submit(_run_as_task, ctx, response_id)
        while not redis.exists(redis_keys.lease(response_id)):  # claimed: its prompt goes to the child
            time.sleep(0.05)
        time.sleep(0.3)
        took = _stop_timed(ctx, child, tasks_timeout=10.0)
        assert task.result(timeout=30) == "handed_off"
    assert took < 3.0
    assert db.run(get_response, response_id).status == "queued"  # type: ignore[union-attr]
    assert not redis.exists(redis_keys.lease(response_id))
    assert dispatched == [response_id]
    db.dispose()


def test_stop_worker_hands_off_mcp_response_whose_prompt_is_on_stopped_tokenizer_child(
    database_url: str, redis_url: str, redis: redis_lib.Redis, calculator_url: str, misbehaving_url: str
) -> None:
    """A request with MCP tools renders its prompt on the engine loop, in_progress, after its listings: the
    child killed under it at the stop is the stop's doing, not the request's. Its response is handed off
    uncounted, as a running one is, not failed (the render's TokenizerClosed had failed it)."""
    settings = tool_settings(database_url, redis_url, calculator_url, misbehaving_url, render_process_above_chars=100)
    db = Database(settings.database_url)
    dispatched: list[str] = []
    ctx = start_worker(settings, with_reaper=False, dispatch=lambda rid, model, secrets: dispatched.append(rid))
    child = _stopped_child(ctx)
    response_id, secrets = accept_with_secrets(db, redis, settings, input=LONG_INPUT, tools=[CALC], background=True)
    with ThreadPoolExecutor(1) as pool:
        task = pool.submit(_run_as_task, ctx, response_id, secrets)
        wait_for_event(redis, response_id, "response.mcp_list_tools.completed")
        time.sleep(0.3)  # its prompt sent to the child
        took = _stop_timed(ctx, child, tasks_timeout=10.0)
        assert task.result(timeout=30) == "handed_off"
    assert took < 3.0
    assert db.run(get_response, response_id).status == "in_progress"  # type: ignore[union-attr]
    assert redis.get(redis_keys.resume(response_id)) == b"handoff"
    assert not redis.exists(redis_keys.takeovers(response_id))
    assert not redis.exists(redis_keys.lease(response_id))
    assert dispatched == [response_id]
    db.dispose()


def _run_until_refused(loop: EngineLoop) -> str:
    while True:
        try:
            loop.run(asyncio.sleep(0), timeout=5)
        except RuntimeError:
            return "refused"
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            return "cancelled"
        except TimeoutError:
            return "waited for a loop that had stopped"


def test_run_racing_engine_loop_stop_never_waits_forever() -> None:
    for _ in range(20):
        loop = EngineLoop().start()
        with ThreadPoolExecutor(4) as pool:
            runs = [pool.submit(_run_until_refused, loop) for _ in range(4)]
            time.sleep(0.01)
            loop.stop()
            assert {run.result() for run in runs} <= {"refused", "cancelled"}


def assert_handed_off(redis: redis_lib.Redis, response_id: str, dispatched: list[str]) -> None:
    """Sent on marked a handoff (not counted), its lease free, its task dispatched once."""
    assert redis.get(redis_keys.resume(response_id)) == b"handoff"
    assert not redis.exists(redis_keys.lease(response_id))
    assert dispatched == [response_id]


def test_stop_worker_with_redis_killed_under_running_response_warns_without_traceback(
    database_url: str, own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The handoff's lease release logged a ConnectionError traceback (its lease lapses by itself): an outage,
    # told by the worker's Redis outage lines; the release's failure is INFO.
    settings = worker_settings(database_url, own_redis.url, scripted_tokens_per_second=20.0)
    client = redis_lib.Redis.from_url(own_redis.url)
    db = Database(settings.database_url)
    response_id = accept(db, client, settings, input="tokens 400", background=True)
    ctx = start_worker(settings, with_reaper=False)
    try:
        with ThreadPoolExecutor(1) as pool:
            task = pool.submit(_run_as_task, ctx, response_id)
            wait_for_event(client, response_id, "response.output_text.delta")
            own_redis.kill()
            with caplog.at_level(logging.INFO):
                started = time.monotonic()
                ctx.stop()
                assert time.monotonic() - started < 10
            with pytest.raises(RedisConnectionError):  # the task goes back to its queue (tasks.py: an outage)
                task.result(timeout=5)
    finally:
        client.close()
        db.dispose()
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert [record.getMessage() for record in warnings if record.exc_info] == []  # no traceback
    released = [record for record in caplog.records if "releasing the lease" in record.getMessage()]
    assert len(released) == 1 and "lapses within 60 s" in released[0].getMessage(), released
    assert released[0].levelno == logging.INFO  # the outage's own WARNING tells it; a lapsing lease is no news
