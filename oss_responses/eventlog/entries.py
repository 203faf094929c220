"""A response's event stream as Redis holds it, read back: entry ids, the end marker's fields, and where a
reader stands (its cursor: the id of the last entry it has seen).

The layout is ``redis_keys.events``': entry ``0-{sequence_number + 1}`` with field ``f`` (the event's SSE
frame); a last entry with field ``end`` closes the stream. Plain functions over the replies, no I/O: the
API's hub reads streams with them, and the worker's archive (``archive.py``) finds the end it trims.
"""

from __future__ import annotations

from typing import cast

from redis.typing import StreamRangeResponse

EntryId = tuple[int, int]
Entry = tuple[bytes, dict[bytes, bytes]]  # (stream entry id, fields)

FIRST: EntryId = (0, 0)  # before event 0 (entry id 0-1)
ARCHIVED = b"archived"  # the tombstone's field: the last sequence number, its events in SQL
# The end marker's field of a stream written anew after Redis lost it (FLUSHALL, an eviction, a restart
# without persistence): how many events the new stream holds. A follower that had read the lost one is
# past them (its cursor skips their ids) and would see a clean end with no terminal event.
REWRITTEN = b"rewritten"


def parse_id(entry_id: bytes) -> EntryId:
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq)


def as_entries(reply: StreamRangeResponse | None) -> list[Entry]:
    """An XRANGE/XREVRANGE reply as the hub's clients get it. redis-py types replies for every client
    setting; these clients never decode responses (ids and fields are bytes), and a range reply never
    holds a deleted entry (None, which only XCLAIM/XAUTOCLAIM return)."""
    return cast(list[Entry], reply or [])


def cursor_after(after: int | None) -> EntryId:
    """The entry id a subscriber has 'seen' when it wants the events after sequence number ``after``."""
    return FIRST if after is None else (0, after + 1)


def take_frames(entries: list[Entry], cursor: EntryId) -> tuple[list[bytes], EntryId, dict[bytes, bytes] | None]:
    """The frames of entries after ``cursor``, the cursor after them, and the end marker's fields
    (None until the end marker came)."""
    if not entries or parse_id(entries[-1][0]) <= cursor:
        return [], cursor, None
    if parse_id(entries[0][0]) <= cursor:
        entries = [e for e in entries if parse_id(e[0]) > cursor]
    frames: list[bytes] = []
    for entry_id, fields in entries:
        data = fields.get(b"f")
        if data is None:
            return frames, cursor, fields
        frames.append(data)
        cursor = parse_id(entry_id)
    return frames, cursor, None


def missed_rewrite(end: dict[bytes, bytes], cursor: EntryId) -> bool:
    """The stream was lost and written anew while this subscriber followed it: its cursor is not where the
    new stream's events end, so it did not get them (the failure saying why)."""
    rewritten = end.get(REWRITTEN)
    return rewritten is not None and cursor[1] != int(rewritten)


def archived_after(end: dict[bytes, bytes], cursor: EntryId) -> int | None:
    """The sequence number after which the archive holds events this subscriber lacks, or None.

    A tombstone (``ARCHIVED`` field: the last sequence number) replaced the stream's entries: a
    subscriber that saw up to event ``cursor[1] - 1`` lacks the archive's events after it.
    """
    last = end.get(ARCHIVED)
    if last is None:
        return None
    seen = seen_through(cursor)
    return seen if int(last) > seen else None


def seen_through(cursor: EntryId) -> int:
    """The sequence number of the last event a subscriber at ``cursor`` has read (-1: none)."""
    return cursor[1] - 1 if cursor[0] == 0 else -1
