"""The hub's two reads: a stream without an entry for ``quiet_after_seconds`` leaves the busy read for
the quiet one, which stays blocked until one of its streams gets an entry; that stream comes back.
What crosses the move must arrive once, in order, as fast as before."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import redis as redis_lib
from support.hub_frames import collect, until

from oss_responses import redis_keys
from oss_responses.eventlog import EventHub, EventWriter, parse_frame, write_events

pytestmark = pytest.mark.anyio

QUIET_AFTER = 0.2


@pytest.fixture
async def lanes_hub(redis_url: str, redis: redis_lib.Redis) -> AsyncIterator[EventHub]:
    # A read that is not woken blocks for 10 s: an event that arrives sooner came through a woken read.
    hub = EventHub(redis_url, block_ms=10_000, quiet_after_seconds=QUIET_AFTER)
    await hub.start()
    yield hub
    await hub.stop()


def follow(hub: EventHub, response_id: str) -> tuple[asyncio.Task[None], list[int]]:
    """A subscription followed by a task of its own (a subscription attaches to the hub's reads only
    while it is iterated): the task, and the sequence numbers it got so far."""
    seen: list[int] = []

    async def run() -> None:
        async for data in hub.subscribe(response_id):
            seen.append(parse_frame(data)["sequence_number"])

    return asyncio.create_task(run()), seen


async def keep_busy(aredis, response_id: str, make_events, stop: asyncio.Event) -> int:
    """Events on ``response_id`` every 20 ms from event 1 until ``stop``; how many were written."""
    number = 1
    while not stop.is_set():
        await write_events(aredis, response_id, make_events(range(number, number + 1)), ttl_seconds=60)
        number += 1
        await asyncio.sleep(0.02)
    return number


@asynccontextmanager
async def busy_stream_beside(hub: EventHub, aredis, make_events) -> AsyncIterator[None]:
    """``resp_busy`` followed and written every 20 ms meanwhile: the busy read returns again and again
    (the moment a quiet stream can leave it), where alone it would block for the whole BLOCK."""
    await write_events(aredis, "resp_busy", make_events(range(1)), ttl_seconds=60)
    task, _ = follow(hub, "resp_busy")
    stop = asyncio.Event()
    writing = asyncio.create_task(keep_busy(aredis, "resp_busy", make_events, stop))
    try:
        yield
    finally:
        stop.set()
        await writing
        task.cancel()


@asynccontextmanager
async def quiet_stream(hub: EventHub, aredis, make_events) -> AsyncIterator[tuple[asyncio.Task[None], list[int]]]:
    """``resp_quiet`` (its event 0 written) followed until it went to the quiet read, with
    ``resp_busy`` beside it: its follower task and the sequence numbers it got so far."""
    await write_events(aredis, "resp_quiet", make_events(range(1)), ttl_seconds=60)
    task, seen = follow(hub, "resp_quiet")
    try:
        async with busy_stream_beside(hub, aredis, make_events):
            await until(lambda: hub.stream_count == 2 and hub.quiet_count == 1)
            yield task, seen
    finally:
        task.cancel()


async def test_stream_without_entries_moves_to_the_quiet_read(lanes_hub, aredis, make_events) -> None:
    async with quiet_stream(lanes_hub, aredis, make_events) as (_, seen):
        await asyncio.sleep(QUIET_AFTER * 2)  # the busy stream's entries keep it where it is

        assert lanes_hub.stream_count == 2 and lanes_hub.quiet_count == 1
        assert seen == [0]


async def test_quiet_stream_gets_its_next_event_at_once(lanes_hub, aredis, make_events) -> None:
    async with quiet_stream(lanes_hub, aredis, make_events) as (_, seen):
        started = time.monotonic()

        await write_events(aredis, "resp_quiet", make_events(range(1, 2)), ttl_seconds=60)

        await until(lambda: seen == [0, 1])
        assert time.monotonic() - started < 1.0  # the quiet read was woken; its block is 10 s
        await until(lambda: lanes_hub.quiet_count == 0)  # busy again


async def test_quiet_stream_ends_its_subscribers_with_its_end_marker(lanes_hub, aredis, make_events) -> None:
    async with quiet_stream(lanes_hub, aredis, make_events) as (task, seen):
        await write_events(aredis, "resp_quiet", make_events(range(1, 3)), close="completed", ttl_seconds=60)

        await asyncio.wait_for(task, timeout=5)
        assert seen == [0, 1, 2]
        assert lanes_hub.subscriber_count("resp_quiet") == 0 and lanes_hub.quiet_count == 0


def monitor_xreads(redis_url: str, stop: threading.Event, seen: list[str]) -> None:
    """Every XREAD Redis receives, as MONITOR shows it, until ``stop``."""
    client = redis_lib.Redis.from_url(redis_url)
    with client.monitor() as monitor:
        for command in monitor.listen():
            if command["command"].startswith("XREAD"):
                seen.append(command["command"])
            if stop.is_set():
                break
    client.close()


async def test_busy_reads_no_longer_name_a_quiet_stream(lanes_hub, aredis, redis_url, make_events) -> None:
    stop_monitor, seen = threading.Event(), []
    watcher = threading.Thread(target=monitor_xreads, args=(redis_url, stop_monitor, seen))
    async with quiet_stream(lanes_hub, aredis, make_events):
        watcher.start()
        await asyncio.sleep(0.5)  # some 25 busy reads
        stop_monitor.set()
        await aredis.ping()  # a command for the monitor to see after the stop
        await asyncio.to_thread(watcher.join, 10)

    busy_key, quiet_key = redis_keys.events("resp_busy"), redis_keys.events("resp_quiet")
    busy_reads = [command for command in seen if busy_key in command]
    assert len(busy_reads) >= 5
    assert [command for command in busy_reads if quiet_key in command] == []


async def test_streams_moving_between_reads_lose_and_repeat_no_event(lanes_hub, aredis, make_events) -> None:
    # Each stream pauses now and then past QUIET_AFTER, so it goes quiet and comes back, while the
    # others keep the busy read going.
    ids = [f"resp_{n}" for n in range(12)]
    total = 40
    rng = random.Random(11)
    for response_id in ids:
        await write_events(aredis, response_id, make_events(range(1)), ttl_seconds=60)
    writer = EventWriter(aredis, ttl_seconds=60)

    async def produce(response_id: str) -> None:
        for number in range(1, total):
            await asyncio.sleep(rng.choice([0.0, 0.01, 0.05, QUIET_AFTER * 2]))
            writer.append(response_id, make_events(range(number, number + 1)))
            await writer.flush()
        writer.close(response_id, "completed")
        await writer.drain(response_id)

    subscriptions = [collect(lanes_hub.subscribe(response_id)) for response_id in ids]
    results = await asyncio.wait_for(
        asyncio.gather(*subscriptions, *(produce(response_id) for response_id in ids)), timeout=60
    )

    assert results[: len(ids)] == [list(range(total))] * len(ids)
