"""Cancel: a running response stops within a second; the stream ends; status cancelled."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
import redis as redis_lib
import redis.asyncio as aioredis
from support.servers import RedisServer
from support.streams import events_of, is_closed
from support.workers import generating

from oss_responses import redis_keys
from oss_responses.storage import delete_response, get_response
from oss_responses.workers import cancel as cancel_module
from oss_responses.workers.cancel import CancelListener
from oss_responses.workers.context import _async_redis

# Far beyond a prompt cancel, far short of what the run would take without one: only a cancel that
# did not work (or waited out its work) gets there.
WALL_GUARD_S = 10.0


def text_deltas(events: list[dict[str, Any]]) -> int:
    return sum(event["type"] == "response.output_text.delta" for event in events)


def test_cancel_mid_generation_ends_within_one_second(
    database_url: str, redis_url: str, redis: redis_lib.Redis
) -> None:
    with generating(database_url, redis_url, redis, tokens=2000) as run:
        db, response_id = run.db, run.response_id
        before = text_deltas(events_of(redis, response_id))
        redis.set(redis_keys.cancel(response_id), "1")
        redis.publish(redis_keys.CANCEL_CHANNEL, response_id)
        assert run.running.result(timeout=WALL_GUARD_S) == "cancelled"
    events = events_of(redis, response_id)
    # A second of generation is 50 tokens at this pace: counted, not timed, since a stalled machine
    # slows the engine's pace along with everything else (the 40 s answer had 1,950 tokens to go).
    assert text_deltas(events) - before <= 50
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "cancelled"
    assert is_closed(redis, response_id)
    assert not any(e["type"] in ("response.completed", "response.failed") for e in events)
    db.dispose()


def test_delete_mid_generation_still_ends_stream(
    database_url: str, redis_url: str, redis: redis_lib.Redis
) -> None:
    with generating(database_url, redis_url, redis, tokens=2000) as run:
        db, response_id = run.db, run.response_id
        redis.set(redis_keys.cancel(response_id), "1")  # what the API's DELETE does: cancel, then delete
        redis.publish(redis_keys.CANCEL_CHANNEL, response_id)
        assert db.run(delete_response, response_id)
        run.running.result(timeout=20)  # a loaded machine (the suite beside it) took over 5 s
    assert is_closed(redis, response_id)
    assert 0 < redis.ttl(redis_keys.events(response_id)) <= run.settings.event_ttl_seconds
    # DELETE removes the content: the worker has no row to archive the log to (it logged a foreign-key
    # traceback, and the whole stream stayed for the event TTL); a tombstone of no event ends it.
    entries = redis.xrange(redis_keys.events(response_id))
    assert [fields for _, fields in entries] == [{b"end": b"cancelled", b"archived": b"-1"}]
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


def test_cancel_published_before_listener_reconnects_is_read_from_flag(
    redis_url: str, redis: redis_lib.Redis
) -> None:
    """The worker's own client retries a lost connection (context.RECONNECT): its pub/sub reconnected and
    re-subscribed by itself, the listener saw no error, and a cancel published in between (its flag set)
    was lost for good: the response ran to its end. The kill, the flag and the PUBLISH reach Redis in
    one round trip, back to back, as a cancel sent right after a connection drop does."""

    async def scenario() -> bool:
        client = await _async_redis(redis_url, 4)
        listener = CancelListener(client)
        cancelled = asyncio.Event()
        await listener.start()
        listener.register("resp_x", cancelled.set)
        with redis.pipeline(transaction=False) as pipe:
            pipe.client_kill_filter(_type="pubsub")
            pipe.set(redis_keys.cancel("resp_x"), "1")
            pipe.publish(redis_keys.CANCEL_CHANNEL, "resp_x")
            _, _, receivers = pipe.execute()
        assert receivers == 0  # nobody subscribed when it was published
        try:
            await asyncio.wait_for(cancelled.wait(), timeout=5)
            return True
        except TimeoutError:
            return False
        finally:
            await listener.stop()
            await client.aclose()

    assert asyncio.run(scenario())


def test_tell_redis_restart_under_listener_as_one_outage(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Its re-subscriptions while Redis was away logged a line each (0.5 s, 1 s, 2 s, then every 5 s): a
    # minute's outage told fifteen times, none saying when it ended.
    async def scenario() -> None:
        client = await _async_redis(own_redis.url, 4)
        listener = CancelListener(client)
        await listener.start()
        try:
            caplog.clear()
            own_redis.kill()
            await asyncio.sleep(2)  # its tries at 0, 0.5 and 1.5 s meet Redis away
            await asyncio.to_thread(own_redis.restart)
            deadline = time.monotonic() + 10
            while not any("answers again" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            await listener.stop()
            await client.aclose()

    with caplog.at_level(logging.WARNING, logger=cancel_module.__name__):
        asyncio.run(scenario())
    lines = [record for record in caplog.records if record.name == cancel_module.__name__]
    messages = [record.getMessage() for record in lines]
    assert len(messages) == 2, messages
    assert messages[0].startswith("cancel listener: Redis unreachable (ConnectionError")
    assert messages[1].startswith("cancel listener: Redis answers again after")
    assert [record for record in lines if record.exc_info] == []
