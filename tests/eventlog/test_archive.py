"""A finished stream moved to SQL: readers replay the same bytes, and one mid-switch misses nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
import redis as redis_lib
from sqlalchemy.exc import OperationalError

from oss_responses import redis_keys
from oss_responses.api import relay
from oss_responses.api.relay import archived_frames
from oss_responses.eventlog import EventHub, StreamNotFound, parse_frame, write_events
from oss_responses.eventlog.losses import ArchiveLost, ArchiveUnreadable, StreamLost
from oss_responses.eventlog.writes import close_commands, event_commands
from oss_responses.storage import (
    AsyncDatabase,
    Database,
    EventLogRow,
    delete_response,
    insert_response,
    utcnow,
)
from oss_responses.storage.event_logs import PAGE_BYTES
from oss_responses.workers.archive import archive_event_log
from tests.support.rows import new_response

pytestmark = pytest.mark.anyio


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    yield database
    database.dispose()


@pytest.fixture
async def adb(database_url: str) -> AsyncIterator[AsyncDatabase]:
    database = AsyncDatabase(database_url)
    yield database
    await database.dispose()


@pytest.fixture
def response_id(db: Database) -> str:
    record = new_response()
    db.run(insert_response, record, [])
    return record.id


def archiving_hub(redis_url: str, adb: AsyncDatabase, **options: int) -> EventHub:
    return EventHub(redis_url, block_ms=10_000, archive=partial(archived_frames, adb), **options)


async def read_all(hub: EventHub, response_id: str, after: int | None = None) -> bytes:
    return b"".join([chunk async for chunk in await hub.open(response_id, after=after, chunked=True)])


def write_sync(redis: redis_lib.Redis, commands: list) -> None:  # type: ignore[type-arg]
    """Written without yielding to the event loop: the hub only sees the result afterwards."""
    with redis.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)
        pipe.execute()


def archive(db: Database, redis: redis_lib.Redis, response_id: str) -> bool:
    return archive_event_log(db, redis, response_id, ttl_seconds=60)


async def test_archive_leaves_one_tombstone_entry(db, redis, aredis, response_id, make_events) -> None:
    await write_events(aredis, response_id, make_events(range(20)), close="completed", ttl_seconds=60)

    assert archive(db, redis, response_id)

    entries = redis.xrange(redis_keys.events(response_id))
    assert [fields for _, fields in entries] == [{b"end": b"completed", b"archived": b"19"}]
    assert 0 < redis.ttl(redis_keys.events(response_id)) <= 60


async def test_archive_of_response_deleted_since_it_ended_drops_its_events(
    db, redis, aredis, response_id, make_events
) -> None:
    await write_events(aredis, response_id, make_events(range(20)), close="cancelled", ttl_seconds=60)
    assert db.run(delete_response, response_id)

    assert not archive(db, redis, response_id)

    entries = redis.xrange(redis_keys.events(response_id))
    assert [fields for _, fields in entries] == [{b"end": b"cancelled", b"archived": b"-1"}]
    assert 0 < redis.ttl(redis_keys.events(response_id)) <= 60


async def test_archive_leaves_a_running_stream_alone(db, redis, aredis, response_id, make_events) -> None:
    await write_events(aredis, response_id, make_events(range(3)), ttl_seconds=60)

    assert not archive(db, redis, response_id)
    assert redis.xlen(redis_keys.events(response_id)) == 3


async def test_replay_after_archive_equals_the_stream_byte_for_byte(
    redis_url, db, adb, redis, aredis, response_id, make_events
) -> None:
    hub = archiving_hub(redis_url, adb)
    await hub.start()
    try:
        await write_events(aredis, response_id, make_events(range(40)), close="completed", ttl_seconds=60)
        before = await read_all(hub, response_id)
        assert archive(db, redis, response_id)
        assert await read_all(hub, response_id) == before
    finally:
        await hub.stop()


async def test_replay_starting_after_n_reads_the_rest_from_the_archive(
    redis_url, db, adb, redis, aredis, response_id, make_events
) -> None:
    hub = archiving_hub(redis_url, adb)
    await hub.start()
    try:
        await write_events(aredis, response_id, make_events(range(40)), close="completed", ttl_seconds=60)
        before = await read_all(hub, response_id, after=24)
        assert archive(db, redis, response_id)
        after = await read_all(hub, response_id, after=24)
        assert after == before and parse_frame(after.split(b"\n\n")[0] + b"\n\n")["sequence_number"] == 25
        assert await read_all(hub, response_id, after=39) == b""
        assert await hub.last_sequence(response_id) == 39
    finally:
        await hub.stop()


def _lose_key(redis: Any, key: str) -> None:
    redis.delete(key)


def _overwrite_key(redis: Any, key: str) -> None:
    redis.set(key, "not a stream")


@pytest.mark.parametrize("after", [None, 24, 39])
@pytest.mark.parametrize("damage", [_lose_key, _overwrite_key], ids=["lost", "overwritten"])
async def test_replay_of_archived_log_whose_stream_key_is_lost_or_overwritten_reads_it_from_sql(
    redis_url, db, adb, redis, aredis, response_id, make_events, after, damage
) -> None:
    """Redis restarted without its data (or was flushed): the tombstone is gone, the log in SQL is not
    (the configuration probe got a 404 'has expired' for a log kept a day). Or the tombstone's key was left
    holding a string (by hand, or a bug): its replay was a 500 (Redis refused the first history read,
    WRONGTYPE). Either way the log in SQL is the same bytes."""
    hub = archiving_hub(redis_url, adb)
    await hub.start()
    try:
        await write_events(aredis, response_id, make_events(range(40)), close="completed", ttl_seconds=60)
        before = await read_all(hub, response_id, after=after)
        assert archive(db, redis, response_id)
        damage(redis, redis_keys.events(response_id))
        assert await read_all(hub, response_id, after=after) == before
        frames = [frame async for frame in await hub.open(response_id, after=after)]
        assert b"".join(frames) == before and all(frame.endswith(b"\n\n") for frame in frames)
    finally:
        await hub.stop()


async def test_replay_of_unarchived_log_whose_stream_is_gone_is_not_found(
    redis_url, adb, redis, aredis, response_id, make_events
) -> None:
    hub = archiving_hub(redis_url, adb)
    await hub.start()
    try:
        await write_events(aredis, response_id, make_events(range(3)), close="completed", ttl_seconds=60)
        redis.delete(redis_keys.events(response_id))
        with pytest.raises(StreamNotFound):
            await hub.open(response_id)
    finally:
        await hub.stop()


async def test_replay_of_archived_log_is_relayed_in_pages_not_whole(
    redis_url, db, adb, redis, aredis, response_id, make_events
) -> None:
    # A client that reads slowly or not at all holds the chunk it waits on: a page, not the whole log
    # decompressed (the resource probe: 27-42 MB of API memory per stalled replay of a 100k-token log).
    hub = archiving_hub(redis_url, adb)
    await hub.start()
    try:
        await write_events(aredis, response_id, make_events(range(2_500)), close="completed", ttl_seconds=60)
        before = await read_all(hub, response_id)
        assert archive(db, redis, response_id)
        chunks = [chunk async for chunk in await hub.open(response_id, chunked=True)]
        assert b"".join(chunks) == before
        largest_frame = max(len(data) + 2 for data in before.split(b"\n\n"))
        assert len(chunks) > 1 and all(len(chunk) < PAGE_BYTES + largest_frame for chunk in chunks)
    finally:
        await hub.stop()


async def test_reader_paging_through_history_during_the_archive_misses_nothing(
    redis_url, db, adb, redis, aredis, response_id, make_events
) -> None:
    hub = archiving_hub(redis_url, adb, count=3)
    await hub.start()
    try:
        await write_events(aredis, response_id, make_events(range(30)), close="completed", ttl_seconds=60)
        expected = await read_all(hub, response_id)
        frames = await hub.open(response_id, chunked=True)
        first = await frames.__anext__()  # the first history page, then the stream is archived
        assert archive(db, redis, response_id)
        assert first + b"".join([chunk async for chunk in frames]) == expected
    finally:
        await hub.stop()


async def test_live_follower_during_the_archive_misses_nothing(
    redis_url, db, adb, redis, aredis, response_id, make_events
) -> None:
    hub = archiving_hub(redis_url, adb)
    await hub.start()
    try:
        await write_events(aredis, response_id, make_events(range(5)), ttl_seconds=60)
        follower = hub.subscribe(response_id)
        assert [parse_frame(await follower.__anext__())["sequence_number"] for _ in range(5)] == list(range(5))
        rest = asyncio.create_task(_collect(follower))  # blocked in the hub's live read
        while hub.subscriber_count(response_id) == 0:
            await asyncio.sleep(0.01)
        # The rest of the response, its end and its archive, with no chance for the hub to read between.
        for n in range(5, 60, 5):
            write_sync(redis, event_commands(response_id, make_events(range(n, n + 5))))
        write_sync(redis, close_commands(response_id, "completed", 60))
        assert archive(db, redis, response_id)
        assert await asyncio.wait_for(rest, 10) == list(range(5, 60))
    finally:
        await hub.stop()


async def _collect(frames: AsyncIterator[bytes]) -> list[int]:
    return [parse_frame(data)["sequence_number"] async for data in frames]


async def test_archive_outlives_the_tombstone(db, redis, aredis, response_id, make_events) -> None:
    await write_events(aredis, response_id, make_events(range(3)), close="completed", ttl_seconds=60)

    assert archive(db, redis, response_id)

    expires_at = db.run(lambda session: session.get(EventLogRow, response_id).expires_at)
    assert expires_at > utcnow() + timedelta(seconds=redis.ttl(redis_keys.events(response_id)))


class _FlakyDatabase:
    """An AsyncDatabase whose first ``failures`` reads fail as a database that does not answer."""

    def __init__(self, adb: AsyncDatabase, failures: int) -> None:
        self.adb, self.failures = adb, failures

    async def run(self, *args: object) -> object:
        if self.failures > 0:
            self.failures -= 1
            raise OperationalError("SELECT", {}, ConnectionRefusedError("the database restarts"))
        return await self.adb.run(*args)  # type: ignore[arg-type]


async def test_replay_of_archive_reads_it_again_while_the_database_does_not_answer(
    redis_url, db, adb, redis, aredis, response_id, make_events
) -> None:
    await write_events(aredis, response_id, make_events(range(40)), close="completed", ttl_seconds=60)
    plain = archiving_hub(redis_url, adb)
    await plain.start()
    try:
        before = await read_all(plain, response_id, after=24)
    finally:
        await plain.stop()
    assert archive(db, redis, response_id)
    hub = EventHub(redis_url, block_ms=10_000, archive=partial(archived_frames, _FlakyDatabase(adb, 3)))
    await hub.start()
    try:
        assert await read_all(hub, response_id, after=24) == before
    finally:
        await hub.stop()


async def _last_frame_of_replay(
    hub: EventHub, response_id: str, ends: type[StreamLost], after: int
) -> dict[str, Any]:
    """The replay after ``after`` ends raising ``ends``: the last frame its relay then sends, parsed."""
    await hub.start()
    try:
        with pytest.raises(ends) as ended:
            await read_all(hub, response_id, after=after)
    finally:
        await hub.stop()
    return parse_frame(relay.lost_stream_frame(response_id, ended.value))


async def test_replay_of_archive_the_database_never_answers_ends_saying_where_to_resume(
    redis_url, db, adb, redis, aredis, response_id, make_events, monkeypatch
) -> None:
    monkeypatch.setattr(relay, "ARCHIVE_OUTAGE_SECONDS", 0.2)
    await write_events(aredis, response_id, make_events(range(40)), close="completed", ttl_seconds=60)
    assert archive(db, redis, response_id)
    hub = EventHub(redis_url, block_ms=10_000, archive=partial(archived_frames, _FlakyDatabase(adb, 10**6)))
    event = await _last_frame_of_replay(hub, response_id, ArchiveUnreadable, after=24)
    assert event["type"] == "error" and event["code"] == "event_log_unavailable"
    assert event["sequence_number"] == 25 and "starting_after=24" in event["message"]


async def test_replay_of_archive_the_database_lost_ends_saying_so(
    redis_url, db, adb, redis, aredis, response_id, make_events
) -> None:
    # A database restored to a point before the archive: the replay ended with a clean, empty 200 stream.
    await write_events(aredis, response_id, make_events(range(40)), close="completed", ttl_seconds=60)
    assert archive(db, redis, response_id)
    db.run(lambda session: session.delete(session.get(EventLogRow, response_id)))
    event = await _last_frame_of_replay(archiving_hub(redis_url, adb), response_id, ArchiveLost, after=24)
    assert event["type"] == "error" and event["code"] == "event_log_lost"
    assert event["sequence_number"] == 25 and "gone from the database" in event["message"]
