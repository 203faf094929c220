"""Cancel: a running response stops within a second; the stream ends; status cancelled."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import redis as redis_lib
import redis.asyncio as aioredis
from support.streams import events_of, is_closed, wait_for_event
from support.workers import accept, worker_settings

from oss_responses import redis_keys
from oss_responses.storage import Database, delete_response, get_response
from oss_responses.workers.cancel import CancelListener
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


def test_delete_mid_generation_still_ends_stream(
    database_url: str, redis_url: str, redis: redis_lib.Redis
) -> None:
    settings = worker_settings(database_url, redis_url, scripted_tokens_per_second=50.0)
    db = Database(settings.database_url)
    response_id = accept(db, redis, settings, input="tokens 2000", background=True)
    with local_worker(settings) as worker, ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_response_now, response_id, worker=worker)
        wait_for_event(redis, response_id, "response.output_text.delta")
        redis.set(redis_keys.cancel(response_id), "1")  # what the API's DELETE does: cancel, then delete
        redis.publish(redis_keys.CANCEL_CHANNEL, response_id)
        assert db.run(delete_response, response_id)
        running.result(timeout=5)
    assert is_closed(redis, response_id)
    assert 0 < redis.ttl(redis_keys.events(response_id)) <= settings.event_ttl_seconds
    db.dispose()


def test_cancel_asked_while_listener_resubscribes_is_not_lost(redis_url: str, redis: redis_lib.Redis) -> None:
    async def scenario() -> bool:
        client = aioredis.Redis.from_url(redis_url)
        listener = CancelListener(client)
        cancelled = asyncio.Event()
        await listener.start()
        listener.register("resp_x", cancelled.set)
        redis.client_kill_filter(_type="pubsub")  # the subscription drops...
        redis.set(redis_keys.cancel("resp_x"), "1")  # ...and the cancel's message is missed
        try:
            await asyncio.wait_for(cancelled.wait(), timeout=5)
            return True
        finally:
            await listener.stop()
            await client.aclose()

    assert asyncio.run(scenario())
