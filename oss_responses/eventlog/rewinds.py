"""A stream written anew from an earlier point: the sequence numbers whose events a reader may have seen otherwise.

Redis restored from a snapshot (or failed over to a replica that lacked the last writes) gives a running
response's stream and journal back as they were then. Its takeover replays the journal and writes the numbers
after it anew; with sampling, other events. A reader that saw an old event under one of those numbers and reads
on after it would take the new ones for the rest of its story. Redis cannot tell: the run that was lost
records in SQL how far it had numbered its stream (``responses.stream_high_water``), and the takeover that
finds the stream ending before that marks the span here (``redis_keys.rewound``) before it writes anything.
A run that died with its Redis records nothing; the API's hub, whose follower finds its stream came back
shorter than it had read, marks what it had read (spans merge). Before the takeover writes, a reader resuming
after a number the running stream lacks is told without a mark (``history.py``). The API's hub reads the mark
only off the per-event path: when a reader resumes after a given number (``starting_after``) and when it
rechecks its followed streams after a failed read.

A reader that saw the new events under those numbers (it followed the takeover, or replayed from the start)
and resumes inside the span is told too: nothing tells which version it saw. A replay from the start is
always whole.
"""

from __future__ import annotations

import logging
import re

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from oss_responses import redis_keys
from oss_responses.eventlog.entries import EntryId, seen_through

log = logging.getLogger(__name__)

Span = tuple[int, int]  # the first and last sequence numbers written anew
_SPAN = re.compile(rb"(\d+) (\d+)")  # as mark_rewound writes it: "FIRST LAST"

# KEYS: the mark. ARGV: first, last, TTL in seconds. Two rollbacks of one response mark the span covering both.
# An old value of another type (GET refused: WRONGTYPE) or that is no span (by hand, another application, a
# bug) is overwritten: it made the script raise, and with it the takeover. Read as parse_span reads it.
_MARK = """
local first, last = tonumber(ARGV[1]), tonumber(ARGV[2])
local read, old = pcall(redis.call, 'GET', KEYS[1])
local a, b
if read and old then a, b = string.match(old, '^(%d+) (%d+)$') end
if a then first, last = math.min(first, tonumber(a)), math.max(last, tonumber(b)) end
redis.call('SET', KEYS[1], first .. ' ' .. last, 'EX', ARGV[3])
return first .. ' ' .. last
"""


def mark_rewound(redis: Redis, response_id: str, span: Span, ttl_seconds: int) -> None:
    """Events ``span`` of the response are written anew from now on (a takeover, before its first write)."""
    redis.eval(_MARK, 1, redis_keys.rewound(response_id), span[0], span[1], ttl_seconds)


async def mark_read_rewound(redis: AsyncRedis, response_id: str, span: Span, ttl_seconds: int) -> None:
    """Events ``span`` of the response, which an API's follower read, are gone from its stream (it came back
    shorter), to be written anew: marked when the hub finds it, since a lost run that died with its Redis
    recorded no high-water mark for its takeover to mark them by."""
    await redis.eval(_MARK, 1, redis_keys.rewound(response_id), span[0], span[1], ttl_seconds)


def parse_span(value: bytes | None) -> Span | None:
    """The span a mark holds: None if none, or if it is no span."""
    span = _SPAN.fullmatch(value or b"")
    return None if span is None else (int(span[1]), int(span[2]))


def read_mark(key: str, reply: object) -> Span | None:
    """The span of the mark ``key`` as a pipeline's GET answered it (``raise_on_error=False``). One holding
    another type (its GET's WRONGTYPE) or a string that is no span (by hand, another application, a bug) is no
    mark, with a WARNING: it was a 500 on a resume and raised in the hub's recheck, and it tells of no rewind."""
    if reply is None:
        return None
    span = parse_span(reply) if isinstance(reply, bytes) else None
    if span is None:
        why = reply if isinstance(reply, Exception) else "a string that is no span"
        log.warning("%s holds something other than a span of events written anew (%s: overwritten by hand, "
                    "another application or a bug): read as no mark", key, why)
    return span


def saw_rewound(span: Span | None, cursor: EntryId) -> bool:
    """A reader at ``cursor`` saw an event whose number was written anew: the rest it would read may not
    continue what it saw."""
    return span is not None and span[0] <= seen_through(cursor) <= span[1]
