"""A worker that stops (Celery stops its engine step before its pool): every task thread still
running hands its response off and ends before the engine loop stops under it, and none waits forever
on a loop that stopped."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from concurrent.futures import ThreadPoolExecutor

import redis as redis_lib
from support.streams import wait_for_event
from support.workers import accept, worker_settings

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.storage import Database, get_response
from oss_responses.workers.context import WorkerContext, start_worker
from oss_responses.workers.engine_loop import EngineLoop
from oss_responses.workers.runner import Outcome
from oss_responses.workers.testing import run_response_now


def _run_as_task(ctx: WorkerContext, response_id: str) -> Outcome:
    with ctx.task():  # as the Celery task body does
        return run_response_now(response_id, worker=ctx)


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
