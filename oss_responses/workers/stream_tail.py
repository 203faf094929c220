"""Where a response's event stream stands: the next sequence number, or closed.

The API writes the opening events (``response.created``, ``response.queued``); whoever writes next
(the runner, or the reaper failing a lost response) continues from the stream's last entry id,
``0-{sequence_number + 1}``.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.typing import StreamRangeResponse

from oss_responses import redis_keys


def next_from_tail(tail: StreamRangeResponse | None) -> int | None:
    """The next sequence number after ``XREVRANGE key + - COUNT 1``; None if the stream ended."""
    if not tail:
        return 0
    entry_id, fields = tail[0]
    # Only XCLAIM/XAUTOCLAIM replies hold deleted entries (None); a range reply never does.
    assert entry_id is not None and fields is not None
    if b"end" in fields or "end" in fields:
        return None
    entry = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(entry.split("-")[1])  # entry 0-{seq + 1}: the next event is number seq + 1


def ended_as(tail: StreamRangeResponse | None) -> str | None:
    """The status the stream's end marker names (``completed``, ``failed``...), from the same reply; None if
    it has not ended."""
    fields = tail[0][1] if tail else None
    end = (fields.get(b"end") or fields.get("end")) if fields else None
    return end.decode() if isinstance(end, bytes) else end


async def next_sequence_number(redis: Redis, response_id: str) -> int | None:
    return next_from_tail(await redis.xrevrange(redis_keys.events(response_id), count=1))
