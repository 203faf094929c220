"""Whether the streams the event hub follows survived a read that failed or that Redis refused.

Only such a read costs these checks (a restart or a failover causes the one, a key overwritten by hand or by
a bug the other): the reads of every event stay as they were.
- A stream that no longer exists was lost with Redis's data (a restart without persistence): its followers
  would wait for good for events that will never come (:class:`StreamLost`).
- Redis restored from a snapshot gives a running stream back shorter; its takeover writes the lost numbers
  anew (with sampling, other text), and a read after the cursor skipped them: a follower saw the old events,
  then the new ones after its cursor, as one story (:class:`StreamRewound`).
- A key holding something other than a stream (WRONGTYPE) fails every read that names it
  (:class:`StreamOverwritten`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from redis.asyncio import Redis

from oss_responses import redis_keys
from oss_responses.eventlog.entries import EntryId, parse_id, seen_through
from oss_responses.eventlog.losses import StreamLost, StreamRewound
from oss_responses.eventlog.rewinds import Span, read_mark, saw_rewound


class Loss(NamedTuple):
    key: str
    how: type[StreamLost]  # how its followers are told
    why: str  # for the log line
    gone: Span | None = None  # the numbers its followers read that the stream no longer holds (came back shorter)


async def overwritten(client: Redis, keys: Iterable[str]) -> dict[str, bytes]:
    """The ``keys`` that hold something other than a stream, and what they hold."""
    keys = list(keys)
    async with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.type(key)
        kinds = await pipe.execute(raise_on_error=False)
    return {key: kind for key, kind in zip(keys, kinds, strict=True)
            if isinstance(kind, bytes) and kind not in (b"stream", b"none")}


async def losses(client: Redis, cursors: dict[str, EntryId]) -> tuple[list[Loss], list[tuple[str, Exception]]]:
    """Of the streams read up to ``cursors``, those lost or rewound, and those whose check Redis refused (with
    its refusal: an overwritten key's, found by :func:`overwritten`)."""
    keys = list(cursors)
    mark_keys = [redis_keys.rewound(key.removeprefix(redis_keys.events(""))) for key in keys]
    async with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.xrevrange(key, "+", "-", count=1)
        for mark_key in mark_keys:
            pipe.get(mark_key)
        replies = await pipe.execute(raise_on_error=False)
    tails, marks = replies[:len(keys)], replies[len(keys):]
    found: list[Loss] = []
    refused: list[tuple[str, Exception]] = []
    for key, tail, mark_key, mark in zip(keys, tails, mark_keys, marks, strict=True):
        cursor = cursors[key]
        if isinstance(tail, Exception):
            refused.append((key, tail))
        elif not tail:
            found.append(Loss(key, StreamLost, "vanished (Redis lost its data)"))
        elif (end := parse_id(tail[0][0])) < cursor:
            found.append(Loss(key, StreamRewound,
                              f"came back shorter than read (Redis restored from an earlier state: ends at "
                              f"{tail[0][0].decode()}, read up to {cursor[0]}-{cursor[1]})",
                              (seen_through(end) + 1, seen_through(cursor))))
        elif saw_rewound(read_mark(mark_key, mark), cursor):
            # Its takeover wrote past the cursor before this check: the mark, written before, tells.
            found.append(Loss(key, StreamRewound,
                              f"was written anew from an earlier state past what was read (events {mark.decode()}, "
                              f"read up to {cursor[0]}-{cursor[1]})"))
    return found, refused

