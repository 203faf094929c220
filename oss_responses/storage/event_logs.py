"""Finished event logs in SQL (``event_logs``): the exact SSE frames of a response, compressed.

A response's events live in its Redis stream while it runs; once it ended, the worker that ended it
moves them here (``workers/archive.py``) and leaves a one-entry tombstone in Redis. The frames are
kept byte for byte: a replay from here is the very bytes a live client got, sequence numbers included
(they are inside the frames). Layout of ``frames``: zlib of the frame lengths (uint32 little-endian,
one per event), then the frames concatenated. A replay decompresses it a page at a time as it sends
(``EventLog.pages_after``): a client that stalls holds the compressed log (a 100k-token log: 0.46 MB)
and one page, where it held the whole log decompressed (27 MB; the resource probe's 25 stalled
replays took the API from 272 to 944 MB).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import cast

from sqlalchemy import Insert, Table, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from oss_responses.storage.models import EventLogRow
from oss_responses.storage.records import database_now, utcnow

_SAVED_COLUMNS = ("first_sequence_number", "event_count", "frames", "expires_at")
# Statements on the table, not the ORM class: an insert of the class takes SQLAlchemy's ORM bulk path,
# a third of an archive's save (measured: 270 against 180 us on SQLite).
_event_logs = cast(Table, EventLogRow.__table__)


# A replay's page: what one read of the archive decompresses and hands on at most (about), as the Redis
# history is read 1,000 entries at a time: a client that reads slowly, or not at all, holds the archive
# compressed and one page, not the whole log decompressed (a 100k-token log: ~27 MB).
PAGE_BYTES = 64 * 1024
PAGE_FRAMES = 1_000


@dataclass(frozen=True)
class EventLog:
    """An archived log as stored: ``blob`` holds its ``event_count`` frames compressed (see the docstring)."""

    first_sequence_number: int
    event_count: int
    blob: bytes

    @property
    def frames(self) -> list[bytes]:
        """Every frame, decompressed at once."""
        return self.after(None)

    def after(self, sequence_number: int | None) -> list[bytes]:
        """The frames of the events numbered above ``sequence_number`` (all with None)."""
        return [data for page in self.pages_after(sequence_number) for data in page]

    def pages_after(
        self, sequence_number: int | None, *, joined: bool = False, page_bytes: int = PAGE_BYTES,
        page_frames: int = PAGE_FRAMES,
    ) -> Iterator[list[bytes]]:
        """The frames after ``sequence_number``, in pages of about ``page_bytes`` or ``page_frames``,
        decompressed as they are taken; ``joined``: each page one bytes, its frames concatenated (what
        an SSE relay sends; no object per frame)."""
        unpacker = _Unpacker(self.blob)
        lengths = unpacker.lengths(self.event_count)
        first = 0 if sequence_number is None else sequence_number + 1 - self.first_sequence_number
        start = min(len(lengths), max(0, first))
        unpacker.skip(sum(lengths[:start]))
        while start < len(lengths):
            end, size = start, 0
            while end < len(lengths) and size < page_bytes and end - start < page_frames:
                size += lengths[end]
                end += 1
            data = unpacker.take(size)
            yield [data] if joined else _split(data, lengths[start:end])
            start = end
        unpacker.finish()


def _split(data: bytes, lengths: Sequence[int]) -> list[bytes]:
    frames, position = [], 0
    for length in lengths:
        frames.append(data[position : position + length])
        position += length
    return frames


class _Unpacker:
    """A blob's frame lengths, then its frames' bytes as asked for: the blob is decompressed a bounded
    slice at a time, so what is held is what was asked for and at most a slice more."""

    _SLICE = 64 * 1024

    def __init__(self, blob: bytes) -> None:
        self._blob = blob
        self._decompressor = zlib.decompressobj()
        self._fed = 0  # bytes of the blob given to the decompressor
        self._buffer = bytearray()  # decompressed, not yet taken from _position on
        self._position = 0

    def lengths(self, count: int) -> tuple[int, ...]:
        return struct.unpack(f"<{count}I", self.take(4 * count))

    def take(self, size: int) -> bytes:
        while len(self._buffer) - self._position < size:
            self._more_or_fail()
        start = self._position
        self._position += size
        return bytes(self._buffer[start : self._position])

    def skip(self, size: int) -> None:
        while size:
            if self._position == len(self._buffer):
                self._more_or_fail()
            step = min(size, len(self._buffer) - self._position)
            self._position += step
            size -= step

    def finish(self) -> None:
        """The frames were all taken: nothing may follow them."""
        while self._more():
            pass
        if len(self._buffer) > self._position:
            raise ValueError("an archived event log does not match its frame lengths")

    def _more_or_fail(self) -> None:
        if not self._more():
            raise ValueError("an archived event log does not match its frame lengths")

    def _more(self) -> bool:
        """Decompress at most a slice more into the buffer; False once the blob is all out."""
        del self._buffer[: self._position]  # what was taken (a bytearray drops its front in place)
        self._position = 0
        decompressor = self._decompressor
        if decompressor.unconsumed_tail:
            source = decompressor.unconsumed_tail
        elif self._fed < len(self._blob):
            source = self._blob[self._fed : self._fed + self._SLICE]
            self._fed += len(source)
        else:
            rest = decompressor.flush()
            self._buffer += rest
            return bool(rest)
        self._buffer += decompressor.decompress(source, self._SLICE)
        return True


def pack_frames(frames: Sequence[bytes]) -> bytes:
    lengths = struct.pack(f"<{len(frames)}I", *map(len, frames))
    return zlib.compress(lengths + b"".join(frames), 6)


def save_event_log(
    session: Session, response_id: str, first_sequence_number: int, frames: Sequence[bytes], expires_at: datetime
) -> None:
    """Store (or store again, identically: a retried archive) a finished response's frames."""
    values = {
        "response_id": response_id,
        "first_sequence_number": first_sequence_number,
        "event_count": len(frames),
        "frames": pack_frames(frames),
        "expires_at": expires_at,
    }
    session.execute(_upsert(session.get_bind().dialect.name), values)


@cache
def _upsert(dialect: str) -> Insert:
    """The archive's upsert, built once per dialect; its values are the execution's parameters."""
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    statement = insert(_event_logs)
    replaced = {name: statement.excluded[name] for name in _SAVED_COLUMNS}
    return statement.on_conflict_do_update(index_elements=["response_id"], set_=replaced)


def get_event_log(session: Session, response_id: str) -> EventLog | None:
    """The archived frames of a response, or None (never archived, or past the event TTL)."""
    row = session.execute(select(_event_logs).where(_event_logs.c.response_id == response_id)).one_or_none()
    if row is None or row.expires_at <= utcnow():
        return None
    return EventLog(row.first_sequence_number, row.event_count, row.frames)


def archived_last_sequence_number(session: Session, response_id: str) -> int | None:
    """The sequence number of the last event of a response's archived log (its frames not read), or None."""
    columns = (_event_logs.c.first_sequence_number, _event_logs.c.event_count, _event_logs.c.expires_at)
    row = session.execute(select(*columns).where(_event_logs.c.response_id == response_id)).one_or_none()
    if row is None or row.expires_at <= utcnow():
        return None
    return int(row.first_sequence_number + row.event_count - 1)


def purge_expired_event_logs(session: Session, *, limit: int = 1_000) -> int:
    """Delete up to ``limit`` event logs past their TTL; how many went."""
    expired = select(EventLogRow.response_id).where(EventLogRow.expires_at <= database_now(session)).limit(limit)
    ids = list(session.execute(expired).scalars())
    if ids:
        session.execute(delete(EventLogRow).where(EventLogRow.response_id.in_(ids)))
    return len(ids)
