"""Cancel: a running response stops within a second; the stream ends; status cancelled."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import redis as redis_lib
from worker_support import accept, events_of, is_closed, wait_for_event, worker_settings

from oss_responses import redis_keys
from oss_responses.storage import Database, get_response
from oss_responses.workers.testing import local_worker, run_response_now


def test_cancel_mid_generation_ends_within_one_second(
    database_url: str, redis_url: str, redis: redis_lib.Redis
) -> None:
    settings = worker_settings(database_url, redis_url, scripted_tokens_per_second=50.0)
    db = Database(settings.database_url)
    response_id = accept(db, redis, settings, input="tokens 2000", background=True)
    with local_worker(settings) as worker, ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_response_now, response_id, worker=worker)
        wait_for_event(redis, response_id, "response.output_text.delta")
        asked = time.monotonic()
        redis.set(redis_keys.cancel(response_id), "1")
        redis.publish(redis_keys.CANCEL_CHANNEL, response_id)
        assert running.result(timeout=5) == "cancelled"
        elapsed = time.monotonic() - asked
    assert elapsed < 1.0
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "cancelled"
    assert is_closed(redis, response_id)
    types = [e["type"] for e in events_of(redis, response_id)]
    assert not any(t in ("response.completed", "response.failed") for t in types)
    db.dispose()
