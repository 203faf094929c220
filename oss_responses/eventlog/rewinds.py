"""A stream written anew from an earlier point: the sequence numbers whose events a reader may have seen otherwise.

Redis restored from a snapshot (or failed over to a replica that lacked the last writes) gives a running
response's stream and journal back as they were then. Its takeover replays the journal and writes the numbers
after it anew; with sampling, other events. A reader that saw an old event under one of those numbers and reads
on after it would take the new ones for the rest of its story. Redis cannot tell: the run that was lost
records in SQL how far it had numbered its stream (``responses.stream_high_water``), and the takeover that
finds the stream ending before that marks the span here (``redis_keys.rewound``) before it writes anything.
The API's hub reads the mark only off the per-event path: when a reader resumes after a given number
(``starting_after``) and when it rechecks its followed streams after a failed read.

A reader that saw the new events under those numbers (it followed the takeover, or replayed from the start)
and resumes inside the span is told too: nothing tells which version it saw. A replay from the start is
always whole.
"""

from __future__ import annotations

from redis import Redis

from oss_responses import redis_keys
from oss_responses.eventlog.entries import EntryId, seen_through

Span = tuple[int, int]  # the first and last sequence numbers written anew

# KEYS: the mark. ARGV: first, last, TTL in seconds. Two rollbacks of one response mark the span covering both.
_MARK = """
local first, last = tonumber(ARGV[1]), tonumber(ARGV[2])
local old = redis.call('GET', KEYS[1])
if old then
  local a, b = string.match(old, '(%d+) (%d+)')
  first, last = math.min(first, tonumber(a)), math.max(last, tonumber(b))
end
redis.call('SET', KEYS[1], first .. ' ' .. last, 'EX', ARGV[3])
return first .. ' ' .. last
"""


def mark_rewound(redis: Redis, response_id: str, span: Span, ttl_seconds: int) -> None:
    """Events ``span`` of the response are written anew from now on (a takeover, before its first write)."""
    redis.eval(_MARK, 1, redis_keys.rewound(response_id), span[0], span[1], ttl_seconds)


def parse_span(value: bytes | None) -> Span | None:
    if not value:
        return None
    first, _, last = value.partition(b" ")
    return int(first), int(last)


def saw_rewound(span: Span | None, cursor: EntryId) -> bool:
    """A reader at ``cursor`` saw an event whose number was written anew: the rest it would read may not
    continue what it saw."""
    return span is not None and span[0] <= seen_through(cursor) <= span[1]
