"""The hub hands a read's frames straight to a client stream's connection (its ``sink``) while the stream's
iteration waits for them with nothing queued; whatever the sink refuses (a full send buffer, a connection
gone) comes out of the iteration instead. Either way the client gets every event once, in order, and a
stream that is lost tells the last event the client got."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis as redis_lib
from redis.asyncio import Redis
from support.hub_frames import collect, until

from oss_responses import redis_keys
from oss_responses.eventlog import EventHub, parse_frame, write_events
from oss_responses.eventlog.losses import StreamLost
from oss_responses.eventlog.writes import close_after

pytestmark = pytest.mark.anyio


class Connection:
    """What the client received, from either way (the hub's hand-over, the iteration) in arrival order;
    it takes an offer while ``taking`` says so."""

    def __init__(self, taking: bool = True) -> None:
        self.taking = taking
        self.received: list[bytes] = []
        self.taken = 0  # offers taken

    def offer(self, data: bytes) -> bool:
        if not self.taking:
            return False
        self.received.append(data)
        self.taken += 1
        return True

    def numbers(self) -> list[int]:
        frames = b"".join(self.received).split(b"\n\n")[:-1]
        return [parse_frame(frame + b"\n\n")["sequence_number"] for frame in frames]


async def _relay(frames: AsyncIterator[bytes], connection: Connection, sending: asyncio.Event | None = None) -> None:
    """The iteration's chunks to ``connection``; after each, a send that waits while ``sending`` is clear."""
    async for chunk in frames:
        connection.received.append(chunk)
        if sending is not None:
            await sending.wait()


async def _write_one_by_one(aredis: Redis, connection: Connection, make_events, numbers: range) -> None:  # type: ignore[no-untyped-def]
    """Each event a read of its own: written once the client has everything before it."""
    for n in numbers:
        await write_events(aredis, "resp_a", make_events(range(n, n + 1)), ttl_seconds=60)
        await until(lambda n=n: connection.numbers()[-1:] == [n])


async def test_open_with_sink_hands_live_batches_to_it_once_in_order(hub: EventHub, aredis: Redis, make_events) -> None:  # type: ignore[no-untyped-def]
    await write_events(aredis, "resp_a", make_events(range(2)), ttl_seconds=60)
    connection = Connection()
    relaying = asyncio.create_task(_relay(await hub.open("resp_a", chunked=True, sink=connection), connection))
    await until(lambda: connection.numbers() == [0, 1])  # history comes out of the iteration
    await _write_one_by_one(aredis, connection, make_events, range(2, 10))
    await write_events(aredis, "resp_a", make_events(range(10, 12)), close="completed", ttl_seconds=60)
    await asyncio.wait_for(relaying, 10)
    assert connection.numbers() == list(range(12))
    assert connection.taken == 8  # each live read but the one with the end marker


async def test_open_with_sink_refusing_yields_every_batch(hub: EventHub, aredis: Redis, make_events) -> None:  # type: ignore[no-untyped-def]
    connection = Connection(taking=False)
    await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
    relaying = asyncio.create_task(_relay(await hub.open("resp_a", chunked=True, sink=connection), connection))
    await _write_one_by_one(aredis, connection, make_events, range(1, 6))
    await write_events(aredis, "resp_a", [], close="completed", ttl_seconds=60)
    await asyncio.wait_for(relaying, 10)
    assert connection.numbers() == list(range(6)) and connection.taken == 0


async def test_open_with_sink_taking_then_refusing_then_taking_keeps_order(
    hub: EventHub, aredis: Redis, make_events  # type: ignore[no-untyped-def]
) -> None:
    connection = Connection()
    await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
    relaying = asyncio.create_task(_relay(await hub.open("resp_a", chunked=True, sink=connection), connection))
    await _write_one_by_one(aredis, connection, make_events, range(1, 4))
    connection.taking = False
    await _write_one_by_one(aredis, connection, make_events, range(4, 7))
    connection.taking = True
    await _write_one_by_one(aredis, connection, make_events, range(7, 10))
    await write_events(aredis, "resp_a", [], close="completed", ttl_seconds=60)
    await asyncio.wait_for(relaying, 10)
    assert connection.numbers() == list(range(10)) and connection.taken == 6


async def test_subscribe_ignores_sink_of_stream_not_chunked(hub: EventHub, aredis: Redis, make_events) -> None:  # type: ignore[no-untyped-def]
    """Unjoined items are frames one by one (the WebSocket's messages): a joined hand-over is not one."""
    connection = Connection()
    await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
    relaying = asyncio.create_task(_relay(await hub.open("resp_a", sink=connection), connection))
    await _write_one_by_one(aredis, connection, make_events, range(1, 4))
    await write_events(aredis, "resp_a", [], close="completed", ttl_seconds=60)
    await asyncio.wait_for(relaying, 10)
    assert connection.numbers() == list(range(4)) and connection.taken == 0


async def test_follower_whose_batches_went_to_its_sink_gets_stream_lost_after_the_last_of_them(
    hub: EventHub, aredis: Redis, redis: redis_lib.Redis, make_events  # type: ignore[no-untyped-def]
) -> None:
    """The loss's error event says where the client is: after the last event handed over, which the
    iteration never saw."""
    connection = Connection()
    await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
    frames = await hub.open("resp_a", chunked=True, sink=connection)
    relaying = asyncio.create_task(_relay(frames, connection))
    await _write_one_by_one(aredis, connection, make_events, range(1, 5))
    redis.delete(redis_keys.events("resp_a"))
    close_after(redis, "resp_a", make_events(range(1)), "failed", 60, rewritten=True)
    with pytest.raises(StreamLost) as lost:
        await asyncio.wait_for(relaying, 10)
    assert lost.value.last_sequence == 4 and connection.taken == 4


async def test_follower_with_sink_detached_for_falling_behind_catches_up_from_history_then_takes_hand_overs(
    redis_url: str, aredis: Redis, make_events  # type: ignore[no-untyped-def]
) -> None:
    """A client stuck in a send (its connection full) lets batches pile up past the hub's bound: it is
    detached, reads what it missed from history, attaches again, and the hub hands it reads again."""
    hub = EventHub(redis_url, max_pending_batches=1, block_ms=10_000)
    await hub.start()
    try:
        connection, sending = Connection(), asyncio.Event()
        sending.set()

        async def write(n: int) -> None:
            """Event ``n`` in a read of its own: the fast follower got it before the next is written."""
            await write_events(aredis, "resp_a", make_events(range(n, n + 1)), ttl_seconds=60)
            assert await collect(fast, 1) == [n]

        await write_events(aredis, "resp_a", make_events(range(1)), ttl_seconds=60)
        frames = await hub.open("resp_a", chunked=True, sink=connection)
        relaying = asyncio.create_task(_relay(frames, connection, sending))
        fast = hub.subscribe("resp_a")
        assert await collect(fast, 1) == [0]
        await until(lambda: connection.numbers() == [0])
        for n in range(1, 4):  # handed over
            await write(n)
            await until(lambda n=n: connection.numbers()[-1:] == [n])
        connection.taking = False
        sending.clear()  # the next send waits for the connection
        await write(4)
        await until(lambda: connection.numbers()[-1:] == [4])  # out of the iteration, whose send now waits
        for n in range(5, 8):  # more batches than the hub keeps for it
            await write(n)
        await until(lambda: hub.subscriber_count("resp_a") == 1)  # the slow one detached
        connection.taking = True
        sending.set()
        await until(lambda: connection.numbers()[-1:] == [7])  # from history
        await until(lambda: hub.subscriber_count("resp_a") == 2)  # attached again
        for n in range(8, 11):
            await write(n)
            await until(lambda n=n: connection.numbers()[-1:] == [n])
        await write_events(aredis, "resp_a", [], close="completed", ttl_seconds=60)
        await asyncio.wait_for(relaying, 10)
        assert connection.numbers() == list(range(11)) and connection.taken == 6
    finally:
        await hub.stop()

