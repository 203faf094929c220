"""A worker whose engine dies (vLLM's engine core lost to a GPU fault, an OOM kill, a crash): its running
responses go on with another worker from their journals, as a lost worker's do, and the worker stops for
its supervisor to start a new engine, instead of failing every response it runs and every one it takes
after. tests/engine/test_engine_core_loss.py kills a real engine core under a real worker process."""

from __future__ import annotations

import redis as redis_lib
from support.engines import DyingEngine
from support.streams import assert_one_story, events_of, story_text
from support.workers import accept

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.engine.base import EngineDead
from oss_responses.engine.scripted import ScriptedEngine
from oss_responses.storage import Database, get_response
from oss_responses.vocab import load_encoding
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.testing import local_worker, run_response_now


def _dying(settings: Settings, outputs: int) -> DyingEngine:
    return DyingEngine(ScriptedEngine.from_settings(settings, load_encoding(settings.tiktoken_dir)), outputs)


def test_response_whose_engine_dies_is_passed_on_not_failed(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    response_id = accept(db, redis, settings, input="tokens 40", background=True)
    with local_worker(settings, engine=_dying(settings, 10)) as worker:
        assert run_response_now(response_id, worker=worker) == "engine_lost"
        assert worker.engine_lost is not None and worker.shutting_down
    assert db.run(get_response, response_id).status == "in_progress"  # type: ignore[union-attr]
    assert not redis.exists(redis_keys.lease(response_id))  # free for the worker that takes it over
    assert redis.get(redis_keys.resume(response_id)) == b"engine_lost"  # the reaper waits for its task


def test_response_passed_on_by_dead_engine_completes_on_another_worker(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    whole = accept(db, redis, settings, input="tokens 40", background=True)
    assert run_response_now(whole, settings) == "completed"
    response_id = accept(db, redis, settings, input="tokens 40", background=True)
    with local_worker(settings, engine=_dying(settings, 10)) as doomed:
        run_response_now(response_id, worker=doomed)
    assert run_response_now(response_id, settings) == "completed"
    events = events_of(redis, response_id)
    assert_one_story(events, db, response_id)
    assert story_text(events) == story_text(events_of(redis, whole))
    # Counted as a lost worker's takeover: a request that kills every engine fails after max_takeovers.
    assert redis.get(redis_keys.takeovers(response_id)) == b"1"


def test_worker_whose_engine_died_hands_off_a_response_it_claims_after(
    db: Database, redis: redis_lib.Redis, settings: Settings
) -> None:
    first = accept(db, redis, settings, input="tokens 40", background=True)
    later = accept(db, redis, settings, input="tokens 40", background=True)
    with local_worker(settings, engine=_dying(settings, 10)) as doomed:
        run_response_now(first, worker=doomed)
        # Not the response's doing, and nothing of it ran: an uncounted handoff (a Celery task that
        # arrives now goes back to the queue before it claims anything: tasks.py).
        assert run_response_now(later, worker=doomed) == "handed_off"
    assert run_response_now(later, settings) == "completed"
    assert_one_story(events_of(redis, later), db, later)


def test_lose_engine_asks_worker_to_exit_once(worker: WorkerContext) -> None:
    asked: list[str] = []
    worker.request_exit = lambda: asked.append("exit")
    for _ in range(3):  # every running response meets the dead engine
        worker.lose_engine(EngineDead("the engine core stopped (a test's)"))
    assert asked == ["exit"]
