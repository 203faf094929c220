"""A closed stream, read whole, and the tombstone that replaces it once its frames are in SQL.

A finished response's stream (its frames and the end marker) would hold ~87 KB of Redis per 256
tokens for the whole event TTL. Once its frames are stored in SQL (``storage/event_logs.py``), the
stream is trimmed to ONE entry (~700 bytes), the tombstone ``end = status, archived = last sequence number``
(-1: none), under the stream's own TTL. Readers (``hub.py``) see an end marker as before; when it is
a tombstone and they have not seen event ``archived`` yet, they read the rest from SQL. So a reader
that was behind while the stream was trimmed misses nothing, and one that comes later replays the
same bytes from SQL. The trim is one script: it leaves the stream alone unless its last entry is
still the end marker that was archived.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import ResponseError

from oss_responses import redis_keys
from oss_responses.eventlog.entries import ARCHIVED, as_entries, parse_id
from oss_responses.redis_refusals import wrong_type

log = logging.getLogger(__name__)

# KEYS[1] the stream; ARGV: the archived end marker's id, its status, the last sequence number.
# A stream's newest node is allocated at stream-node-max-bytes (4 KB) whatever it holds; DUMP and
# RESTORE (TTL kept) store the one-entry tombstone at its size instead: ~700 bytes.
TOMBSTONE_SCRIPT = """
local tail = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #tail == 0 or tail[1][1] ~= ARGV[1] then return 0 end
redis.call('XTRIM', KEYS[1], 'MAXLEN', 0)
redis.call('XADD', KEYS[1], '*', 'end', ARGV[2], 'archived', ARGV[3])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then ttl = 0 end
redis.call('RESTORE', KEYS[1], ttl, redis.call('DUMP', KEYS[1]), 'REPLACE')
return 1
"""


# KEYS: the stream, the journal, the open streams. ARGV: the end marker's status, the archive's last sequence
# number, the TTL in seconds, the response id. Whatever the stream holds is replaced by the tombstone of the
# log already in SQL, and the stream is closed as an end marker closes it (``writes.close_commands``).
SUPERSEDED_SCRIPT = """
redis.call('XTRIM', KEYS[1], 'MAXLEN', 0)
redis.call('XADD', KEYS[1], '*', 'end', ARGV[1], 'archived', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], ARGV[4])
return 1
"""


@dataclass(frozen=True)
class ClosedStream:
    first_sequence_number: int
    frames: list[bytes]
    end_id: bytes
    status: bytes
    ttl_ms: int  # the stream's remaining TTL (-1: none)

    @property
    def last_sequence_number(self) -> int:
        return self.first_sequence_number + len(self.frames) - 1


def read_closed_stream(redis: Redis, response_id: str) -> ClosedStream | None:
    """The whole stream if it ended with an end marker after contiguous events; None otherwise
    (still running, gone, or already a tombstone)."""
    key = redis_keys.events(response_id)
    with redis.pipeline(transaction=False) as pipe:
        pipe.xrange(key)
        pipe.pttl(key)
        entries, ttl_ms = pipe.execute()
    if not entries or b"end" not in entries[-1][1] or ARCHIVED in entries[-1][1]:
        return None
    *events, (end_id, end) = entries
    ids = [parse_id(entry_id) for entry_id, _ in events]
    first = ids[0][1] - 1 if ids else 0
    if ids != [(0, first + 1 + n) for n in range(len(ids))]:
        return None  # not the contiguous 0-{n} ids the writers give: leave it as it is
    return ClosedStream(first, [fields[b"f"] for _, fields in events], end_id, end[b"end"], ttl_ms)


def leave_tombstone(redis: Redis, response_id: str, closed: ClosedStream) -> bool:
    """Replace the archived stream by its tombstone; False if the stream changed since it was read."""
    done = redis.eval(
        TOMBSTONE_SCRIPT, 1, redis_keys.events(response_id),
        closed.end_id, closed.status, closed.last_sequence_number,
    )
    return bool(done)


def tombstone_over(redis: Redis, response_id: str, status: str, last_sequence_number: int, ttl_seconds: int) -> None:
    """The stream replaced by the tombstone of its log archived in SQL (events up to ``last_sequence_number``):
    the stream came back older than that log (a Redis restored from an earlier snapshot), and the archive,
    not the shorter stream, is what its clients saw."""
    keys = (redis_keys.events(response_id), redis_keys.journal(response_id), redis_keys.OPEN_STREAMS)
    redis.eval(SUPERSEDED_SCRIPT, len(keys), *keys, status, last_sequence_number, ttl_seconds, response_id)


async def drop_closed_stream(redis: AsyncRedis, response_id: str) -> bool:
    """A deleted response's closed stream, not archived (still queued when deleted, cancelled while queued,
    failed by the reaper), replaced by a tombstone of no event (-1): its frames (instructions, tools,
    metadata; an ended one's output) would stay in Redis for the event TTL after the DELETE. A running
    stream is its worker's to drop when it ends (``workers/archive.py``); a tombstone is left as it is.
    True if this dropped it."""
    key = redis_keys.events(response_id)
    try:
        tail = as_entries(await redis.xrevrange(key, "+", "-", count=1))
    except ResponseError as exc:
        if not wrong_type(exc):
            raise
        log.warning("the event log key %s of deleted %s holds something other than a stream (%s): left as it is",
                    key, response_id, exc)
        return False
    if not tail or b"end" not in tail[0][1] or ARCHIVED in tail[0][1]:
        return False
    end_id, end = tail[0]
    return bool(await redis.eval(TOMBSTONE_SCRIPT, 1, key, end_id, end[b"end"], -1))
