"""The engine loop: one asyncio loop thread serving many task threads at once."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis as redis_lib
from support.workers import accept, worker_settings

from oss_responses.config import Settings
from oss_responses.storage import Database, get_response
from oss_responses.workers.engine_loop import EngineLoop
from oss_responses.workers.testing import local_worker, run_response_now


def test_run_returns_result_computed_on_loop_thread() -> None:
    loop = EngineLoop().start()
    try:
        async def where() -> str:
            return threading.current_thread().name

        assert loop.run(where(), timeout=5) == "engine-loop"
    finally:
        loop.stop()


def test_stop_cancels_pending_coroutines() -> None:
    loop = EngineLoop().start()
    future = loop.submit(asyncio.sleep(60))
    loop.stop()
    assert future.cancelled() or isinstance(future.exception(timeout=5), asyncio.CancelledError)
    with pytest.raises(RuntimeError):
        loop.run(asyncio.sleep(0))


def test_call_soon_runs_callback_on_loop_before_later_submissions() -> None:
    loop = EngineLoop().start()
    try:
        seen: list[str] = []
        loop.call_soon(lambda: seen.append(threading.current_thread().name))

        async def after() -> list[str]:
            return list(seen)

        assert loop.run(after(), timeout=5) == ["engine-loop"]
    finally:
        loop.stop()


def test_call_soon_refuses_once_loop_stopped() -> None:
    loop = EngineLoop().start()
    loop.stop()
    with pytest.raises(RuntimeError):
        loop.call_soon(lambda: None)


def test_engine_loop_runs_many_responses_at_once(
    database_url: str, redis_url: str, redis: redis_lib.Redis
) -> None:
    # 16 responses of 30 engine steps each (max_output_tokens): one after another would take 480 steps.
    # Counted in steps, not seconds: a stalled machine stretches steps, the count stays near 30.
    settings: Settings = worker_settings(database_url, redis_url, scripted_step_interval_seconds=0.02)
    db = Database(settings.database_url)
    ids = [accept(db, redis, settings, input=f"tokens 20 for {i}", max_output_tokens=30) for i in range(16)]
    with local_worker(settings) as worker, ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(lambda rid: run_response_now(rid, worker=worker), ids))
        steps = worker.engine.clock.steps  # type: ignore[attr-defined]
    assert set(outcomes) == {"incomplete"}  # the analysis message uses part of the 30 tokens
    assert all(db.run(get_response, rid).status == "incomplete" for rid in ids)  # type: ignore[union-attr]
    assert steps < 480 / 4
    db.dispose()
