from __future__ import annotations

import asyncio
import logging
import os
import signal
import time

import pytest
import redis as redis_lib
from redis.asyncio import Redis
from redis.exceptions import ResponseError
from support.hub_frames import collect, until
from support.servers import start_redis

from oss_responses import redis_keys
from oss_responses.eventlog import (
    EventHub,
    EventHubStopped,
    EventWriter,
    StreamNotFound,
    lane,
    parse_frame,
    supervision,
    write_events,
)
from oss_responses.eventlog.frames import keepalive_frame
from oss_responses.eventlog.losses import StreamLost, StreamOverwritten, StreamRewound
from oss_responses.eventlog.pipe import PipeBroken
from oss_responses.eventlog.rewinds import mark_rewound, parse_span
from oss_responses.eventlog.writes import close_after
from oss_responses.redis_pool import CONNECT_ATTEMPTS

pytestmark = pytest.mark.anyio


async def test_subscribe_from_start_yields_every_frame_until_end(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(5)), close="completed", ttl_seconds=60)
    assert await collect(hub.subscribe("resp_a", after=None)) == [0, 1, 2, 3, 4]


async def test_subscribe_after_n_yields_only_later_frames(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(5)), close="completed", ttl_seconds=60)
    assert await collect(hub.subscribe("resp_a", after=2)) == [3, 4]


async def test_subscribe_pages_through_long_history(redis_url, redis, aredis, make_events) -> None:
    hub = EventHub(redis_url, count=7)
    await hub.start()
    try:
        await write_events(aredis, "resp_a", make_events(range(50)), close="completed", ttl_seconds=60)
        assert await collect(hub.subscribe("resp_a", after=10)) == list(range(11, 50))
    finally:
        await hub.stop()


@pytest.mark.parametrize("protocol", [2, 3])
async def test_live_read_follows_a_stream_in_either_redis_protocol(
    redis_url, redis, aredis, make_events, protocol
) -> None:
    hub = EventHub(f"{redis_url}{'&' if '?' in redis_url else '?'}protocol={protocol}")
    await hub.start()
    try:
        await write_events(aredis, "resp_a", make_events(range(2)), ttl_seconds=60)
        frames = hub.subscribe("resp_a", after=None)
        assert await collect(frames, limit=2) == [0, 1]
        await write_events(aredis, "resp_a", make_events(range(2, 4)), close="completed", ttl_seconds=60)
        assert await collect(frames) == [2, 3]
    finally:
        await hub.stop()


async def test_subscribers_follow_a_concurrent_writer_without_gap_or_duplicate(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
    writer = EventWriter(aredis, ttl_seconds=60)
    total = 400

    async def produce() -> None:
        for n in range(1, total):
            writer.append("resp_a", make_events(range(n, n + 1)))
            if n % 3 == 0:
                await writer.flush()
        writer.close("resp_a", "completed")
        await writer.drain("resp_a")

    async def subscribe_late(after: int | None, delay_events: int) -> list[int]:
        while await hub.last_sequence("resp_a") < delay_events:
            await asyncio.sleep(0)
        return await collect(hub.subscribe("resp_a", after=after))

    starts = [(None, 0), (5, 0), (None, 50), (100, 150), (None, 300), (195, 200)]
    results = await asyncio.gather(produce(), *(subscribe_late(a, d) for a, d in starts))
    for (after, _), numbers in zip(starts, results[1:], strict=True):
        first = 0 if after is None else after + 1
        assert numbers == list(range(first, total))


async def test_follower_of_stream_lost_and_written_anew_gets_stream_lost(hub, aredis, redis, make_events) -> None:
    """FLUSHALL or an eviction while a response ran: its takeover wrote the failure into a new stream, at ids
    the follower of the lost one had passed, and the follower saw a clean end with no terminal event."""
    await write_events(aredis, "resp_a", make_events(range(5)), ttl_seconds=60)
    subscription = hub.subscribe("resp_a", after=None)
    assert await collect(subscription, limit=5) == [0, 1, 2, 3, 4]
    redis.delete(redis_keys.events("resp_a"))
    close_after(redis, "resp_a", make_events(range(1)), "failed", 60, rewritten=True)
    with pytest.raises(StreamLost) as lost:
        await collect(subscription)
    assert lost.value.last_sequence == 4


def _kill_live_read(redis: redis_lib.Redis) -> None:
    reader = next(c for c in redis.client_list() if c["cmd"] == "xread")
    redis.client_kill_filter(_id=reader["id"])


async def test_follower_of_stream_that_came_back_shorter_gets_stream_rewound(hub, aredis, redis, make_events) -> None:
    """Redis restored from a snapshot while a response ran: its stream came back shorter, its takeover wrote the
    lost numbers anew (other text, with sampling), and the follower, past them, read on after its cursor as if
    one story went on. Told instead, once the read that the restart broke is made again."""
    await write_events(aredis, "resp_a", make_events(range(8)), ttl_seconds=60)
    subscription = hub.subscribe("resp_a", after=None)
    assert await collect(subscription, limit=8) == list(range(8))
    following = asyncio.create_task(collect(subscription))
    await until(lambda: any(c["cmd"] == "xread" for c in redis.client_list()))
    redis.delete(redis_keys.events("resp_a"))  # the snapshot's stream: 0..4
    await write_events(aredis, "resp_a", make_events(range(5)), ttl_seconds=60)
    _kill_live_read(redis)  # the restart breaks the read (the takeover writes 5.. anew a lease later)
    with pytest.raises(StreamRewound) as lost:
        await asyncio.wait_for(following, 10)
    assert lost.value.last_sequence == 7


@pytest.mark.parametrize(("after", "rewound"), [(4, False), (5, True), (7, True), (8, False)])
async def test_resume_inside_span_a_follower_lost_gets_stream_rewound_after_unmarked_takeover(
    hub, aredis, redis, make_events, after, rewound
) -> None:
    """The stream came back shorter than a follower had read (5..7 gone), and its lost run, dead with its Redis,
    recorded no high-water mark: the takeover writes 5.. anew unmarked. The hub that found the follower's loss
    marked what it had read, so a reader who resumes inside it after the rewrite is told too."""
    await write_events(aredis, "resp_a", make_events(range(8)), ttl_seconds=60)
    subscription = hub.subscribe("resp_a", after=None)
    assert await collect(subscription, limit=8) == list(range(8))
    following = asyncio.create_task(collect(subscription))
    await until(lambda: any(c["cmd"] == "xread" for c in redis.client_list()))
    redis.delete(redis_keys.events("resp_a"))
    await write_events(aredis, "resp_a", make_events(range(5)), ttl_seconds=60)
    _kill_live_read(redis)
    with pytest.raises(StreamRewound):
        await asyncio.wait_for(following, 10)
    assert 0 < redis.ttl(redis_keys.rewound("resp_a")) <= 86_400
    await write_events(aredis, "resp_a", make_events(range(5, 12)), close="completed", ttl_seconds=60)
    frames = await hub.open("resp_a", after=after)
    if rewound:
        with pytest.raises(StreamRewound):
            await collect(frames)
    else:
        assert await collect(frames) == list(range(after + 1, 12))


async def test_follower_of_stream_written_past_its_cursor_before_the_recheck_gets_stream_rewound(
    hub, aredis, redis, make_events
) -> None:
    """The same restore, but the takeover (a lease that had lapsed in the snapshot, a fast engine) wrote the lost
    numbers anew past the follower's cursor before the hub's recheck: the stream no longer looks shorter. The
    takeover marked the span before its first write, and the recheck reads the mark."""
    await write_events(aredis, "resp_a", make_events(range(8)), ttl_seconds=60)
    subscription = hub.subscribe("resp_a", after=None)
    assert await collect(subscription, limit=8) == list(range(8))
    following = asyncio.create_task(collect(subscription))
    await until(lambda: any(c["cmd"] == "xread" for c in redis.client_list()))
    _kill_live_read(redis)  # the restart breaks the read; the recheck comes 0.5 s after
    redis.delete(redis_keys.events("resp_a"))  # the snapshot's stream: 0..4
    await write_events(aredis, "resp_a", make_events(range(5)), ttl_seconds=60)
    mark_rewound(redis, "resp_a", (5, 9), 60)  # the lost run had numbered up to 9
    await write_events(aredis, "resp_a", make_events(range(5, 12)), ttl_seconds=60)  # the takeover, past 7
    with pytest.raises(StreamRewound) as lost:
        await asyncio.wait_for(following, 10)
    assert lost.value.last_sequence == 7


@pytest.mark.parametrize(("after", "rewound"), [(4, False), (5, True), (9, True), (10, False)])
async def test_resume_after_event_written_anew_gets_stream_rewound(
    hub, aredis, redis, make_events, after, rewound
) -> None:
    """A reader that comes back later with starting_after inside the span a takeover wrote anew saw an old event
    there: the new ones after it would not continue its story. Before the span (kept from the snapshot) or after
    it (only ever written once), it reads on."""
    await write_events(aredis, "resp_a", make_events(range(12)), close="completed", ttl_seconds=60)
    mark_rewound(redis, "resp_a", (5, 9), 60)
    frames = await hub.open("resp_a", after=after)
    if rewound:
        with pytest.raises(StreamRewound) as lost:
            await collect(frames)
        assert lost.value.last_sequence == after
    else:
        assert await collect(frames) == list(range(after + 1, 12))


@pytest.mark.parametrize(("after", "rewound"), [(9, False), (10, True), (25, True)])
async def test_resume_past_the_end_of_a_running_stream_gets_stream_rewound(
    hub, aredis, make_events, after, rewound
) -> None:
    """A running stream that ends before the event a reader resumes after came back from an earlier state (a
    snapshot, a lagging replica) and its takeover has not written those numbers anew yet (a worker that died with
    its Redis recorded no mark): followed, the reader took the new events after its cursor for the rest of the
    old story. It is told before any of them; a reader at the stream's last event reads on."""
    await write_events(aredis, "resp_a", make_events(range(10)), ttl_seconds=60)
    frames = await hub.open("resp_a", after=after)
    await write_events(aredis, "resp_a", make_events(range(10, 30)), close="completed", ttl_seconds=60)
    if rewound:
        with pytest.raises(StreamRewound) as lost:
            await collect(frames)
        assert lost.value.last_sequence == after
    else:
        assert await collect(frames) == list(range(10, 30))


def _overwrite(redis: redis_lib.Redis, key: str, value: str) -> None:
    """``key`` left holding a list (``value`` "list") or the string ``value``: by hand, another application, a bug."""
    redis.delete(key)
    if value == "list":
        redis.rpush(key, "5 9")
    else:
        redis.set(key, value)


def _warned_once_without_traceback(caplog: pytest.LogCaptureFixture, key: str) -> bool:
    """One WARNING names ``key``, and no traceback but a read broken by the test's kill (``_kill_live_read``)."""
    warned = [r for r in caplog.records if key in r.getMessage() and r.levelname == "WARNING"]
    tracebacks = [r for r in caplog.records if r.exc_info and not isinstance(r.exc_info[1], PipeBroken)]
    return len(warned) == 1 and not tracebacks and not [r for r in caplog.records if "raised" in r.getMessage()]


@pytest.mark.parametrize("value", ["list", "garbage", "5", "5 9 x"])
async def test_resume_with_rewound_mark_overwritten_reads_on_as_without_mark(
    hub, aredis, redis, make_events, caplog, value
) -> None:
    """The mark's key holding a list or a string that is no span was a 500 with a traceback on every resume
    (WRONGTYPE in the history's pipeline, or int() of it): it is no mark, with a WARNING naming the key."""
    await write_events(aredis, "resp_a", make_events(range(12)), close="completed", ttl_seconds=60)
    _overwrite(redis, redis_keys.rewound("resp_a"), value)
    assert await collect(await hub.open("resp_a", after=7)) == list(range(8, 12))
    assert _warned_once_without_traceback(caplog, redis_keys.rewound("resp_a"))


async def test_follower_recheck_with_rewound_mark_overwritten_reads_on(
    hub, aredis, redis, make_events, caplog
) -> None:
    """A string that is no span in the mark's key raised in the hub's recheck after a failed read (int() of
    it): it is no mark, with a WARNING naming the key, and the follower reads on."""
    await write_events(aredis, "resp_a", make_events(range(3)), ttl_seconds=60)
    subscription = hub.subscribe("resp_a", after=None)
    assert await collect(subscription, limit=3) == [0, 1, 2]
    following = asyncio.create_task(collect(subscription))
    await until(lambda: any(c["cmd"] == "xread" for c in redis.client_list()))
    _overwrite(redis, redis_keys.rewound("resp_a"), "garbage")
    _kill_live_read(redis)
    await write_events(aredis, "resp_a", make_events(range(3, 5)), close="completed", ttl_seconds=60)
    assert await asyncio.wait_for(following, 10) == [3, 4]
    assert hub.failing() is None and _warned_once_without_traceback(caplog, redis_keys.rewound("resp_a"))


@pytest.mark.parametrize("value", ["list", "garbage", "5", "5 9 x"])
def test_mark_rewound_over_overwritten_mark_writes_its_span(redis, value) -> None:
    """A mark's key holding a list or a string that is no span made the script raise (WRONGTYPE in its GET, or
    math.min of nil), and with it the takeover: it is overwritten with the new span."""
    _overwrite(redis, redis_keys.rewound("resp_a"), value)
    mark_rewound(redis, "resp_a", (3, 7), 60)
    assert redis.get(redis_keys.rewound("resp_a")) == b"3 7"
    assert 0 < redis.ttl(redis_keys.rewound("resp_a")) <= 60


def test_mark_rewound_twice_covers_both_spans(redis) -> None:
    mark_rewound(redis, "resp_a", (5, 9), 60)
    mark_rewound(redis, "resp_a", (3, 7), 60)
    assert parse_span(redis.get(redis_keys.rewound("resp_a"))) == (3, 9)
    assert 0 < redis.ttl(redis_keys.rewound("resp_a")) <= 60


async def test_follower_of_stream_whose_read_failed_reads_on_when_nothing_was_lost(
    hub, aredis, redis, make_events
) -> None:
    await write_events(aredis, "resp_a", make_events(range(3)), ttl_seconds=60)
    subscription = hub.subscribe("resp_a", after=None)
    assert await collect(subscription, limit=3) == [0, 1, 2]
    following = asyncio.create_task(collect(subscription))
    await until(lambda: any(c["cmd"] == "xread" for c in redis.client_list()))
    _kill_live_read(redis)
    await write_events(aredis, "resp_a", make_events(range(3, 5)), close="completed", ttl_seconds=60)
    assert await asyncio.wait_for(following, 10) == [3, 4]


async def test_follower_of_overwritten_stream_gets_stream_overwritten_while_others_read_on(
    hub, aredis, redis, make_events, caplog
) -> None:
    """A followed key left holding a string (by hand, or a bug): Redis refuses every read that names it
    (WRONGTYPE), and the lane's read was retried every 0.5 s for good, all of its followers stalled."""
    for response_id in ("resp_a", "resp_b"):
        await write_events(aredis, response_id, make_events(range(2)), ttl_seconds=60)
    good = hub.subscribe("resp_a", after=None)
    assert await collect(good, limit=2) == [0, 1]
    bad = asyncio.create_task(collect(hub.subscribe("resp_b", after=None)))
    await until(lambda: hub.subscriber_count("resp_b") == 1)
    redis.set(redis_keys.events("resp_b"), "not a stream")
    await write_events(aredis, "resp_a", make_events(range(2, 3)), ttl_seconds=60)  # ends the read on its way
    assert await asyncio.wait_for(collect(good, limit=1), 5) == [2]
    await write_events(aredis, "resp_a", make_events(range(3, 5)), close="completed", ttl_seconds=60)
    assert await asyncio.wait_for(collect(good), 5) == [3, 4]
    with pytest.raises(StreamOverwritten) as lost:
        await asyncio.wait_for(bad, 5)
    assert lost.value.last_sequence == 1
    assert hub.failing() is None and not [r for r in caplog.records if "raised" in r.getMessage()]


@pytest.mark.parametrize("after", [None, 1])
async def test_open_overwritten_stream_raises_stream_overwritten_when_iterated(hub, aredis, redis, make_events,
                                                                                after) -> None:
    """A new subscriber of a key left holding a string: its first history read, which Redis refuses (WRONGTYPE),
    raised redis-py's bare ResponseError, a 500 to a replay (``GET ?stream=true``) instead of the ``error`` event
    a follower of the same key gets."""
    await write_events(aredis, "resp_a", make_events(range(3)), ttl_seconds=60)
    redis.set(redis_keys.events("resp_a"), "not a stream")
    frames = await hub.open("resp_a", after=after, chunked=True, client_stream=True)
    with pytest.raises(StreamOverwritten) as lost:
        await collect(frames)
    assert lost.value.last_sequence == (-1 if after is None else after)
    assert hub.stream_count == 0


async def test_subscribe_overwritten_stream_raises_stream_overwritten(hub, aredis, redis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(3)), ttl_seconds=60)
    redis.set(redis_keys.events("resp_a"), "not a stream")
    with pytest.raises(StreamOverwritten) as lost:
        await collect(hub.subscribe("resp_a", after=None))
    assert lost.value.last_sequence == -1


async def test_subscribe_paging_history_of_overwritten_stream_raises_stream_overwritten(
    redis_url, redis, aredis, make_events
) -> None:
    """Overwritten between two history pages (the first one read, the next one refused)."""
    hub = EventHub(redis_url, count=2)
    await hub.start()
    try:
        await write_events(aredis, "resp_a", make_events(range(6)), ttl_seconds=60)
        subscription = hub.subscribe("resp_a", after=None)
        assert await collect(subscription, limit=2) == [0, 1]
        redis.set(redis_keys.events("resp_a"), "not a stream")
        with pytest.raises(StreamOverwritten) as lost:
            await collect(subscription)
        assert lost.value.last_sequence == 1
    finally:
        await hub.stop()


async def test_open_stream_redis_refuses_to_read_raises_the_refusal(hub, aredis, redis, make_events) -> None:
    """A refusal that the key's type does not explain (here, XRANGE taken from the hub's user) is not taken for
    an overwritten stream."""
    await write_events(aredis, "resp_a", make_events(range(3)), ttl_seconds=60)
    redis.execute_command("ACL", "SETUSER", "default", "-xrange")
    try:
        with pytest.raises(ResponseError) as refused:
            await hub.open("resp_a")
    finally:
        redis.execute_command("ACL", "SETUSER", "default", "+xrange")
    assert not isinstance(refused.value, StreamLost)


async def test_hub_whose_reads_redis_refuses_for_no_key_says_so(hub, aredis, redis, make_events, monkeypatch) -> None:
    """A refusal that no followed key explains (here, XREAD taken from the hub's user) was retried every 0.5 s
    for good, unseen by /readyz: it is the supervisor's."""
    monkeypatch.setattr(supervision, "RESTART_SECONDS", 0.01)
    monkeypatch.setattr(supervision, "FAILURE_WINDOW_SECONDS", 2.0)
    await write_events(aredis, "resp_a", make_events(range(2)), ttl_seconds=60)
    following = asyncio.create_task(collect(hub.subscribe("resp_a", after=None)))
    await until(lambda: hub.subscriber_count("resp_a") == 1)
    redis.execute_command("ACL", "SETUSER", "default", "-xread")
    try:
        await write_events(aredis, "resp_a", make_events(range(2, 3)), ttl_seconds=60)  # ends the read on its way
        await until(lambda: hub.failing() is not None)
    finally:
        redis.execute_command("ACL", "SETUSER", "default", "+xread")
    assert "busy lane's reader failed" in hub.failing()  # type: ignore[operator]
    await write_events(aredis, "resp_a", [], close="completed", ttl_seconds=60)
    assert await asyncio.wait_for(following, 10) == [0, 1, 2]
    await until(lambda: hub.failing() is None, timeout=5)


async def test_live_follower_reads_on_while_redis_loads_its_data(make_events, caplog) -> None:
    """A Redis that restarted answers LOADING until its data is in: an outage, read again once it answers (not a
    refusal for the supervisor)."""
    server = start_redis()
    client = Redis.from_url(server.url)
    hub = EventHub(server.url, block_ms=10_000)
    try:
        await write_events(client, "resp_a", make_events(range(2)), ttl_seconds=600)
        await client.mset({f"filler:{n}": "x" for n in range(5_000)})  # loaded 0.2 ms each: a second
        await hub.start()
        following = asyncio.create_task(collect(hub.subscribe("resp_a", after=None)))
        await until(lambda: hub.subscriber_count("resp_a") == 1)
        await client.save()
        server.kill()
        server.args += ["--key-load-delay", "200", "--loading-process-events-interval-bytes", "1024"]
        await asyncio.to_thread(server.restart)  # returns once loaded; the hub reads meanwhile
        await client.aclose()
        client = Redis.from_url(server.url)  # not its connection to the Redis that was killed
        await write_events(client, "resp_a", make_events(range(2, 4)), close="completed", ttl_seconds=600)
        assert await asyncio.wait_for(following, 15) == [0, 1, 2, 3]
        told = [r.getMessage() for r in caplog.records if "answers again" in r.getMessage()]
        assert len(told) == 1 and "the last BusyLoadingError" in told[0]
        assert hub.failing() is None and not [r for r in caplog.records if "raised" in r.getMessage()]
    finally:
        await hub.stop()
        await client.aclose()
        server.stop()


async def test_follower_through_redis_restart_logs_outage_in_two_lines_without_traceback(make_events, caplog) -> None:
    # Each failed read of each lane logged a traceback, twice a second for as long as Redis was away (24 in 6 s).
    server = start_redis(appendonly=True)
    client = Redis.from_url(server.url)
    hub = EventHub(server.url, block_ms=10_000)
    try:
        await write_events(client, "resp_a", make_events(range(2)), ttl_seconds=600)
        await hub.start()
        following = asyncio.create_task(collect(hub.subscribe("resp_a", after=None)))
        await until(lambda: hub.subscriber_count("resp_a") == 1)
        server.kill()
        await asyncio.sleep(2.5)  # several failed tries of both lanes
        await asyncio.to_thread(server.restart)
        await client.aclose()
        client = Redis.from_url(server.url)
        await write_events(client, "resp_a", make_events(range(2, 4)), close="completed", ttl_seconds=600)
        assert await asyncio.wait_for(following, 15) == [0, 1, 2, 3]
    finally:
        await hub.stop()
        await client.aclose()
        server.stop()
    lines = [r for r in caplog.records if r.name == "oss_responses.eventlog.hub" and r.levelno >= logging.WARNING]
    assert [r for r in lines if r.exc_info] == []
    told = [r.getMessage() for r in lines]
    assert len(told) == 2, told
    assert told[0].startswith("event hub: Redis unreachable (")
    assert told[1].startswith("event hub: Redis answers again after ")


async def test_subscriber_of_stream_written_anew_gets_its_events_and_end(hub, redis, make_events) -> None:
    # Opened after the loss, it reads the new stream whole: the failure, then the end.
    close_after(redis, "resp_a", make_events(range(1)), "failed", 60, rewritten=True)
    assert await collect(hub.subscribe("resp_a", after=None)) == [0]


async def test_two_subscribers_of_one_stream_share_one_read(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(2)), ttl_seconds=60)
    first, second = hub.subscribe("resp_a"), hub.subscribe("resp_a")
    assert await collect(first, 2) == [0, 1]
    assert await collect(second, 2) == [0, 1]
    rest = [asyncio.create_task(collect(s)) for s in (first, second)]
    await until(lambda: hub.subscriber_count("resp_a") == 2)
    assert hub.stream_count == 1
    await write_events(aredis, "resp_a", make_events(range(2, 4)), close="completed", ttl_seconds=60)
    assert await asyncio.gather(*rest) == [[2, 3], [2, 3]]


async def test_one_reader_follows_200_streams(hub, aredis, make_events) -> None:
    ids = [f"resp_{n}" for n in range(200)]
    for response_id in ids:
        await write_events(aredis, response_id, make_events(range(1)), ttl_seconds=60)
    subscriptions = [hub.subscribe(response_id) for response_id in ids]
    assert [await collect(s, 1) for s in subscriptions] == [[0]] * 200
    rest = [asyncio.create_task(collect(s)) for s in subscriptions]
    await until(lambda: hub.stream_count == 200)
    writer = EventWriter(aredis, ttl_seconds=60)
    for response_id in ids:
        writer.append(response_id, make_events(range(1, 3)))
        writer.close(response_id, "completed")
    assert await asyncio.gather(*rest) == [[1, 2]] * 200
    assert hub.stream_count == 0


async def test_new_subscriber_does_not_wait_for_the_blocking_read(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
    await write_events(aredis, "resp_b", make_events(range(1)), ttl_seconds=60)
    waiting = hub.subscribe("resp_a")
    assert await collect(waiting, 1) == [0]
    pending = asyncio.create_task(collect(waiting, 1))
    await until(lambda: hub.stream_count == 1)
    await asyncio.sleep(0.05)  # the reader is now blocked (10 s) on resp_a alone
    late = hub.subscribe("resp_b")
    assert await collect(late, 1) == [0]
    started = time.monotonic()
    await write_events(aredis, "resp_b", make_events(range(1, 2)), ttl_seconds=60)
    assert await collect(late, 1) == [1]
    assert time.monotonic() - started < 5.0  # not the blocked read's 10 s
    pending.cancel()


async def test_closing_a_subscription_unsubscribes_it(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
    frames = hub.subscribe("resp_a")
    assert await collect(frames, 1) == [0]
    following = asyncio.create_task(frames.__anext__())
    await until(lambda: hub.stream_count == 1)
    following.cancel()
    with pytest.raises(asyncio.CancelledError):
        await following
    await frames.aclose()
    assert hub.stream_count == 0


async def test_subscribe_unknown_stream_raises_stream_not_found(hub) -> None:
    with pytest.raises(StreamNotFound):
        await collect(hub.subscribe("resp_missing"))


async def test_open_unknown_stream_raises_before_iteration(hub) -> None:
    with pytest.raises(StreamNotFound):
        await hub.open("resp_missing", after=None)


async def test_open_chunked_joins_frames_of_one_read(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(3)), close="completed", ttl_seconds=60)
    chunks = [chunk async for chunk in await hub.open("resp_a", chunked=True)]
    assert len(chunks) == 1 and chunks[0].count(b"\n\n") == 3


@pytest.fixture
async def ticking_hub(redis_url, redis):
    """A hub whose heartbeat timer ticks every 50 ms."""
    hub = EventHub(redis_url, heartbeat_seconds=0.05)
    await hub.start()
    yield hub
    await hub.stop()


async def test_open_client_stream_yields_keepalive_events_while_the_stream_is_quiet(
    ticking_hub, aredis, make_events
) -> None:
    """Numbered as the last event the subscriber has: one resuming after it misses nothing."""
    await write_events(aredis, "resp_a", make_events(range(2)), ttl_seconds=60)
    chunks = await ticking_hub.open("resp_a", chunked=True, client_stream=True)
    assert (await anext(chunks)).count(b"\n\n") == 2
    keepalive = keepalive_frame(1)
    assert [await anext(chunks), await anext(chunks)] == [keepalive, keepalive]  # quiet: one per tick or two
    assert parse_frame(keepalive) == {"type": "keepalive", "sequence_number": 1}
    await write_events(aredis, "resp_a", make_events(range(2, 3)), close="completed", ttl_seconds=60)
    rest = [chunk async for chunk in chunks]
    assert [chunk for chunk in rest if chunk] and rest[-1].count(b"\n\n") == 1


async def test_open_client_stream_is_never_quiet_longer_than_the_heartbeat_interval(
    redis_url, redis, aredis, make_events
) -> None:
    """A proxy idle timeout set from the interval cut streams: the timer marked a stream quiet on one tick and
    sent on the next, so a batch just after a tick left it silent for up to two intervals. One per interval
    while it stays quiet, as before."""
    interval = 0.4
    hub = EventHub(redis_url, heartbeat_seconds=interval)
    await hub.start()
    try:
        await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
        chunks = await hub.open("resp_a", chunked=True, client_stream=True)
        await anext(chunks)
        after_batch, between = [], []
        for n in range(1, 4):
            assert await anext(chunks) == keepalive_frame(n - 1)  # a heartbeat: a tick just passed
            await write_events(aredis, "resp_a", make_events(range(n, n + 1)), ttl_seconds=60)
            assert (await anext(chunks)).count(b"\n\n") == 1
            sent = time.monotonic()
            assert await anext(chunks) == keepalive_frame(n)
            after_batch.append(time.monotonic() - sent)
            assert await anext(chunks) == keepalive_frame(n)
            between.append(time.monotonic() - sent - after_batch[-1])
        # The timer ticks four times an interval, so a gap may run a tick (0.25 interval) over; the bound
        # leaves a loaded CI machine as much again, below the two intervals the old timer left.
        assert max(after_batch) < interval * 1.5, after_batch
        assert all(interval * 0.8 < gap < interval * 1.5 for gap in between), between
    finally:
        await hub.stop()


async def test_open_other_subscription_yields_nothing_while_the_stream_is_quiet(
    ticking_hub, aredis, make_events
) -> None:
    await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
    chunks = await ticking_hub.open("resp_a", chunked=True)
    assert (await anext(chunks)).count(b"\n\n") == 1
    waiting = asyncio.ensure_future(anext(chunks))
    await asyncio.sleep(0.3)  # six ticks
    assert not waiting.done()
    await write_events(aredis, "resp_a", make_events(range(1, 2)), close="completed", ttl_seconds=60)
    assert (await waiting).count(b"\n\n") == 1


async def test_end_client_streams_ends_live_and_later_client_streams_with_hub_stopped(
    hub, aredis, make_events
) -> None:
    await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
    live = asyncio.ensure_future(anext(await hub.open("resp_a", after=0, client_stream=True)))
    await until(lambda: hub.subscriber_count("resp_a") == 1)
    later = await hub.open("resp_a", client_stream=True)  # its history read, not yet following
    hub.end_client_streams()
    with pytest.raises(EventHubStopped):
        await live
    assert await collect(later, limit=1) == [0]  # what it had read is still sent
    with pytest.raises(EventHubStopped):
        await anext(later)
    assert hub.stream_count == 0


async def test_end_client_streams_leaves_other_subscriptions_following(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
    waiting = asyncio.ensure_future(collect(hub.subscribe("resp_a", after=0)))
    client = asyncio.ensure_future(anext(await hub.open("resp_a", after=0, client_stream=True)))
    await until(lambda: hub.subscriber_count("resp_a") == 2)
    hub.end_client_streams()
    with pytest.raises(EventHubStopped):
        await client
    await write_events(aredis, "resp_a", make_events(range(1, 3)), close="completed", ttl_seconds=60)
    assert await waiting == [1, 2]


def xrange_calls(redis) -> int:
    return int(redis.info("commandstats").get("cmdstat_xrange", {}).get("calls", 0))


async def test_open_without_history_reads_no_history(hub, redis, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(2)), ttl_seconds=60)
    before = xrange_calls(redis)
    frames = await hub.open("resp_a", after=1, history=False)
    await write_events(aredis, "resp_a", make_events(range(2, 4)), close="completed", ttl_seconds=60)
    assert await collect(frames) == [2, 3]
    assert xrange_calls(redis) == before


async def test_open_without_history_gets_events_written_before_it(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(5)), close="completed", ttl_seconds=60)
    assert await collect(await hub.open("resp_a", after=1, history=False)) == [2, 3, 4]


async def test_open_without_history_behind_a_live_follower_catches_up(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(2)), ttl_seconds=60)
    ahead = hub.subscribe("resp_a", after=None)
    await write_events(aredis, "resp_a", make_events(range(2, 4)), ttl_seconds=60)
    assert await collect(ahead, limit=4) == [0, 1, 2, 3]  # the hub now reads the stream after event 3
    behind = await hub.open("resp_a", after=1, history=False)
    await write_events(aredis, "resp_a", make_events(range(4, 5)), close="completed", ttl_seconds=60)
    assert await collect(behind) == [2, 3, 4]
    assert await collect(ahead) == [4]


async def test_slow_subscriber_catches_up_from_history(redis_url, redis, aredis, make_events) -> None:
    hub = EventHub(redis_url, max_pending_batches=1)
    await hub.start()
    try:
        await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
        slow, fast = hub.subscribe("resp_a"), hub.subscribe("resp_a")
        assert await collect(slow, 1) == [0] and await collect(fast, 1) == [0]
        slow_next = asyncio.create_task(slow.__anext__())  # attached, then never read again
        await until(lambda: hub.subscriber_count("resp_a") == 1)
        for n in range(1, 30):  # one read each: the slow one falls more than one batch behind
            await write_events(aredis, "resp_a", make_events(range(n, n + 1)), ttl_seconds=60)
            assert await collect(fast, 1) == [n]
        await write_events(aredis, "resp_a", [], close="completed", ttl_seconds=60)
        assert parse_frame(await slow_next)["sequence_number"] == 1
        assert await collect(slow) == list(range(2, 30))
    finally:
        await hub.stop()


async def test_last_sequence_reads_the_last_event(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(4)), close="completed", ttl_seconds=60)
    assert await hub.last_sequence("resp_a") == 3
    with pytest.raises(StreamNotFound):
        await hub.last_sequence("resp_missing")


async def test_live_read_goes_on_after_its_connection_is_killed(hub, redis, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(2)), ttl_seconds=60)
    following = asyncio.create_task(collect(hub.subscribe("resp_a", after=None)))
    await until(lambda: any(c["cmd"] == "xread" for c in redis.client_list()))
    reader = next(c for c in redis.client_list() if c["cmd"] == "xread")
    redis.client_kill_filter(_id=reader["id"])
    await write_events(aredis, "resp_a", make_events(range(2, 4)), close="completed", ttl_seconds=60)
    assert await asyncio.wait_for(following, 10) == [0, 1, 2, 3]


async def test_live_read_follows_a_stream_behind_a_password_and_a_database_number(make_events) -> None:
    server = start_redis()
    try:
        with redis_lib.Redis(port=server.port) as unauthenticated:
            unauthenticated.config_set("requirepass", "s3cret")
        url = f"redis://:s3cret@127.0.0.1:{server.port}/3"
        admin = redis_lib.Redis.from_url(url)
        writer = Redis.from_url(url)
        hub = EventHub(url)
        await hub.start()
        try:
            frames = hub.subscribe("resp_a", after=None)
            await write_events(writer, "resp_a", make_events(range(1)), ttl_seconds=60)
            following = asyncio.create_task(collect(frames))
            await until(lambda: any(c["cmd"] == "xread" for c in admin.client_list()))
            await write_events(writer, "resp_a", make_events(range(1, 3)), close="completed", ttl_seconds=60)
            assert await asyncio.wait_for(following, 10) == [0, 1, 2]
        finally:
            await hub.stop()
            await writer.aclose()
            admin.close()
    finally:
        server.stop()


async def test_side_reads_connect_again_after_connect_timeouts(redis_url, connect_timeouts) -> None:
    """A burst of new streams opens many connections at once, on a loop that runs behind: a connect
    that times out is tried again (``redis_pool.PatientPool``), not the client's 503."""
    hub = EventHub(redis_url)
    await hub.start()
    try:
        attempts = connect_timeouts(CONNECT_ATTEMPTS - 1)
        with pytest.raises(StreamNotFound):  # Redis answered: the stream does not exist
            await hub.last_sequence("resp_none")
        assert attempts == list(range(1, CONNECT_ATTEMPTS + 1))
    finally:
        await hub.stop()


async def test_last_event_reads_sequence_and_type_of_open_stream_last_event(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(4)), ttl_seconds=60)
    assert await hub.last_event("resp_a") == (3, "response.output_text.delta")


async def test_last_event_of_ended_or_unknown_stream_is_none(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(4)), close="completed", ttl_seconds=60)
    assert await hub.last_event("resp_a") is None
    assert await hub.last_event("resp_missing") is None


@pytest.mark.parametrize("ahead", [3, 1_000])
async def test_subscriber_ahead_of_the_log_is_told_and_costs_later_subscribers_no_event(
    hub, aredis, make_events, ahead
) -> None:
    # A follower of a running response that asks for events after one its log has not reached is told so (see
    # test_resume_past_the_end_of_a_running_stream_gets_stream_rewound); the process's shared read, which such a
    # follower had once moved past the log's end, still starts where the log is for the next one.
    await write_events(aredis, "resp_a", make_events(range(3)), ttl_seconds=60)
    with pytest.raises(StreamRewound):
        await asyncio.wait_for(collect(hub.subscribe("resp_a", after=ahead)), 5)
    behind = asyncio.create_task(collect(hub.subscribe("resp_a", after=0)))
    await until(lambda: hub.subscriber_count("resp_a") == 1)
    await write_events(aredis, "resp_a", make_events(range(3, 8)), close="completed", ttl_seconds=60)
    assert await asyncio.wait_for(behind, 5) == list(range(1, 8))


async def test_subscriber_after_the_last_event_of_an_ended_stream_ends_at_once(hub, aredis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(3)), close="completed", ttl_seconds=60)
    assert await asyncio.wait_for(collect(hub.subscribe("resp_a", after=50)), 5) == []


def _dispatch_failing(hub: EventHub, times: int) -> list[int]:
    """The hub's dispatch raises ``times`` times (then dispatches), as a bug would half-way: the stream's cursor
    moved past the read's entries, its subscribers not given them. How many times it raised."""
    dispatch, raised = hub._dispatch, [0]

    def failing(key: str, entries: list, reading: dict, now: float) -> None:
        if raised[0] < times:
            raised[0] += 1
            reading[key].move_to(entries[-1][0])
            raise ValueError("an entry the reader did not expect")
        dispatch(key, entries, reading, now)

    hub._dispatch = failing  # type: ignore[method-assign]
    return raised


async def test_live_follower_goes_on_after_its_reader_raised(hub, aredis, make_events, caplog) -> None:
    """A reader that raised ended its task unseen: its followers waited on keep-alives for good. Restarted,
    the follower gets every event once, the read the failure lost included."""
    await write_events(aredis, "resp_a", make_events(range(2)), ttl_seconds=60)
    following = asyncio.create_task(collect(hub.subscribe("resp_a", after=None)))
    await until(lambda: hub.subscriber_count("resp_a") == 1)
    raised = _dispatch_failing(hub, 1)
    await write_events(aredis, "resp_a", make_events(range(2, 4)), ttl_seconds=60)
    await until(lambda: raised[0] == 1)
    await write_events(aredis, "resp_a", make_events(range(4, 6)), close="completed", ttl_seconds=60)
    assert await asyncio.wait_for(following, 10) == [0, 1, 2, 3, 4, 5]
    failed = [record for record in caplog.records if "busy lane's reader raised" in record.getMessage()]
    assert failed and failed[0].exc_info is not None
    assert hub.failing() is None  # once is no trend


async def test_hub_whose_reader_keeps_failing_says_so_until_it_reads_again(
    hub, aredis, make_events, monkeypatch
) -> None:
    monkeypatch.setattr(supervision, "RESTART_SECONDS", 0.01)
    monkeypatch.setattr(supervision, "FAILURE_WINDOW_SECONDS", 2.0)
    await write_events(aredis, "resp_a", make_events(range(2)), ttl_seconds=60)
    following = asyncio.create_task(collect(hub.subscribe("resp_a", after=None)))
    await until(lambda: hub.subscriber_count("resp_a") == 1)
    raised = _dispatch_failing(hub, 4)  # each restart reads the same entries again, and fails again
    await write_events(aredis, "resp_a", make_events(range(2, 4)), ttl_seconds=60)
    await until(lambda: hub.failing() is not None)
    assert "busy lane's reader failed" in hub.failing()  # type: ignore[operator]
    await write_events(aredis, "resp_a", [], close="completed", ttl_seconds=60)
    assert await asyncio.wait_for(following, 10) == [0, 1, 2, 3]
    await until(lambda: hub.failing() is None, timeout=5)
    assert raised[0] >= supervision.UNREADY_FAILURES


async def test_stop_hub_with_redis_killed_warns_without_traceback(caplog) -> None:
    # An API stopped while Redis is down: each lane's DEL of its wake stream logged a ConnectionError traceback.
    server = start_redis()
    hub = EventHub(server.url, block_ms=10_000)
    try:
        await hub.start()
        server.kill()
        caplog.clear()
        started = time.monotonic()
        await hub.stop()
        assert time.monotonic() - started < 5
    finally:
        server.stop()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings if r.exc_info] == []  # no traceback
    assert len([r for r in warnings if "could not delete its wake stream" in r.getMessage()]) == 2  # one per lane


async def test_stop_hub_with_redis_stopped_ends_within_seconds(caplog) -> None:
    # An API stopped while Redis is frozen (SIGSTOP: connected, never answering): each lane's DEL of its wake stream
    # waited 15 s, one after the other, and the API took 30 s to exit.
    server = start_redis()
    hub = EventHub(server.url, block_ms=10_000)
    try:
        await hub.start()
        os.kill(server.process.pid, signal.SIGSTOP)
        caplog.clear()
        started = time.monotonic()
        await asyncio.wait_for(hub.stop(), 10)
        assert time.monotonic() - started < 2 * lane.STOP_REDIS_SECONDS + 2
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        server.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and not r.exc_info]
    assert len([m for m in warnings if "could not delete its wake stream" in m and "no answer within" in m]) == 2
