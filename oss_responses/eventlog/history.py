"""What a subscriber of the event hub reads before it follows live, and after the end marker: a stream's
history (XRANGE pages from its cursor) and, once a stream was archived, the rest from SQL.

History reads go through the hub's side connections, one page of ``count`` entries at a time, retried while
Redis is away for up to ``outage_seconds`` (a follower catching up carries on once Redis is back). A read Redis
refuses because the key holds something other than a stream raises :class:`StreamOverwritten`, as the hub's
lanes tell their followers; a resume after an event written anew since Redis came back from an earlier state
raises :class:`StreamRewound` (``rewinds.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from oss_responses import redis_keys
from oss_responses.eventlog.entries import (
    FIRST,
    Entry,
    EntryId,
    archived_after,
    as_entries,
    missed_rewrite,
    parse_id,
    seen_through,
)
from oss_responses.eventlog.losses import (
    ArchiveLost,
    ArchiveUnreadable,
    StreamLost,
    StreamNotFound,
    StreamOverwritten,
    StreamRewound,
)
from oss_responses.eventlog.rewinds import read_mark, saw_rewound

_T = TypeVar("_T")

log = logging.getLogger(__name__)

# (response id, after sequence number: -1 for all, joined) -> the archived frames after it, in pages taken
# one at a time, each one bytes when joined; None if none (see storage/event_logs.py).
ArchiveReader = Callable[[str, int, bool], Awaitable[Iterable[list[bytes]] | None]]


async def patiently(
    call: Callable[[], Awaitable[_T]], away: tuple[type[Exception], ...], seconds: float, what: str
) -> _T:
    """``call()``, tried again while it raises one of ``away`` (its store did not answer: a restart, a full
    pool), pausing 0.1 s doubling to 2 s, for up to ``seconds``; past that the last error is raised."""
    delay, waited = 0.1, 0.0
    while True:
        try:
            return await call()
        except away:
            if waited >= seconds:
                raise
            log.warning("%s: its store did not answer; retrying in %.1fs", what, delay)
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, 2.0)


async def raising(lost: StreamLost) -> AsyncIterator[bytes]:
    """An iteration that raises ``lost`` at once: a stream that cannot be followed is told as its followers are."""
    raise lost
    yield b""  # pragma: no cover (a generator)


async def pages_as_frames(pages: Iterable[list[bytes]], chunked: bool) -> AsyncIterator[bytes]:
    for page in pages:
        if chunked:
            yield b"".join(page)
        else:
            for data in page:
                yield data


class History:
    """A hub's history reads. ``client``: the hub's side client (there once the hub started)."""

    def __init__(
        self, client: Callable[[], Redis], *, count: int, outage_seconds: float, archive: ArchiveReader | None
    ) -> None:
        self._client = client
        self.count = count
        self._outage_seconds = outage_seconds
        self._archive = archive

    async def first_page(self, key: str, cursor: EntryId, response_id: str) -> tuple[list[Entry], EntryId]:
        """History after ``cursor``, and the id of the log's last entry (FIRST if it has none).
        :class:`StreamRewound` when the reader resumes after an event that was written anew since
        (``rewinds.py``: one more command in the same round trip, for a resume only), or after one that the
        running stream lacks."""
        mark_key = redis_keys.rewound(response_id)
        async with self._client().pipeline(transaction=False) as pipe:
            pipe.exists(key)
            pipe.xrange(key, _exclusive(cursor), "+", count=self.count)
            pipe.xrevrange(key, "+", "-", count=1)
            if cursor != FIRST:
                pipe.get(mark_key)
            # Refusals come back as replies: the mark's own (its key of another type) is no mark, not the stream's.
            exists, page, last, *mark = await pipe.execute(raise_on_error=False)
        if (refused := next((r for r in (exists, page, last) if isinstance(r, ResponseError)), None)) is not None:
            raise await self._refused(key, cursor, refused) from refused
        if not exists:
            raise StreamNotFound(key)
        if mark and saw_rewound(read_mark(mark_key, mark[0]), cursor):
            log.warning("event hub: a reader of %s resumes after event %d, written anew since (Redis restored from "
                        "an earlier state); it is told so", key, seen_through(cursor))
            raise StreamRewound(cursor)
        entries = as_entries(last)
        tail = parse_id(entries[0][0]) if entries else FIRST
        if tail < cursor and not (entries and b"end" in entries[0][1]):
            # A running stream that ends before what its reader got: Redis came back from an earlier state, and
            # the takeover has not written those numbers anew yet (the rewound mark, when there is one, comes with
            # its first write; a worker that died with Redis left none). Followed, the reader would take the new
            # events after its cursor as the rest of the old story; a made-up starting_after is told the same.
            log.warning("event hub: a reader of %s resumes after event %d, which its running stream lacks (it ends at "
                        "event %d: Redis restored from an earlier state?); it is told so", key, seen_through(cursor),
                        seen_through(tail))
            raise StreamRewound(cursor)
        return as_entries(page), tail

    async def page(self, key: str, cursor: EntryId) -> list[Entry]:
        """History after ``cursor``, retried while Redis is unreachable (for up to ``outage_seconds``)."""
        try:
            page = await patiently(lambda: self._client().xrange(key, _exclusive(cursor), "+", count=self.count),
                                   (RedisConnectionError, RedisTimeoutError), self._outage_seconds,
                                   f"event hub reading {key}")
        except ResponseError as refused:
            raise await self._refused(key, cursor, refused) from refused
        return as_entries(page)

    async def _refused(self, key: str, cursor: EntryId, refused: ResponseError) -> Exception:
        """What a history read of ``key`` that Redis refused raises: :class:`StreamOverwritten` if the key holds
        something other than a stream (WRONGTYPE), as the lane tells its followers; else the refusal itself.
        Only a refused read costs the check."""
        kind = await self._client().type(key)
        if not isinstance(kind, bytes) or kind in (b"stream", b"none"):
            return refused
        log.warning("event hub: %s holds a %s, not a stream (%s); its reader is told so", key, kind.decode(), refused)
        return StreamOverwritten(cursor)

    async def archive_alone(self, response_id: str, cursor: EntryId, joined: bool) -> Iterable[list[bytes]] | None:
        """The archived log after ``cursor`` of a stream Redis no longer holds (None: SQL holds none)."""
        if self._archive is None:
            return None
        return await self._archive(response_id, seen_through(cursor), joined)

    async def rest(
        self, response_id: str, cursor: EntryId, end: dict[bytes, bytes], joined: bool
    ) -> Iterable[list[bytes]]:
        """What a subscriber lacks once it reached the end marker: the archive's events, or, for a stream
        written anew after Redis lost it, :class:`StreamLost` (its relay then says so in an ``error`` event)."""
        if missed_rewrite(end, cursor):
            raise StreamLost(cursor)
        return await self._archived_rest(response_id, cursor, end, joined)

    async def _archived_rest(
        self, response_id: str, cursor: EntryId, end: dict[bytes, bytes], joined: bool
    ) -> Iterable[list[bytes]]:
        """What a subscriber lacks when the stream was archived (moved to SQL) before it read it all, in
        pages taken one at a time: a slow client holds one, not the whole log."""
        after = archived_after(end, cursor)
        if after is None:
            return ()
        try:
            pages = None if self._archive is None else await self._archive(response_id, after, joined)
        except Exception as exc:  # the reader's store failed: the subscriber learns where its stream stopped
            log.error("the archived event log of %s could not be read (%s): its stream ends early", response_id,
                      type(exc).__name__)
            raise ArchiveUnreadable(cursor) from exc
        if pages is None:  # not an empty end: its subscriber learns that the rest is gone
            log.error("the event log of %s was archived but the archive is gone: its stream ends early", response_id)
            raise ArchiveLost(cursor)
        return pages


def _exclusive(cursor: EntryId) -> str:
    return f"({cursor[0]}-{cursor[1]}"
