"""A stream's writes as Redis commands, and the writes made in one round trip outside the worker's buffered
:class:`~oss_responses.eventlog.writer.EventWriter`: the API's (an accept's opening events, a cancel's end
marker) and a thread's (the reaper ending a stream, a task thread failing a response it cannot run).

Events go in as ``XADD``s at ids made of their sequence numbers (``redis_keys.event_id``), so a write made
twice lands once and a late one after the end marker is refused; the end marker closes the stream, sets its
TTL, deletes the journal and takes the stream out of the open streams, in the same round trip.
"""

from __future__ import annotations

from collections.abc import Iterable

from redis import Redis as SyncRedis
from redis.asyncio import Redis

from oss_responses import redis_keys
from oss_responses.eventlog.bulk import Command, Packed, pack_event_entries, run_commands
from oss_responses.eventlog.frames import StreamEvent, frame
from oss_responses.redis_refusals import wrong_type


class EventWriteError(RuntimeError):
    """A buffered write of this response did not reach Redis."""


class EventLogOverwritten(EventWriteError):
    """The response's stream key holds something other than a stream (WRONGTYPE: set by hand, by another
    application or by a bug): no event can be written there, now or later. Its readers are told
    ``event_log_lost`` (``losses.StreamOverwritten``); the key is left as it is."""


def framed(events: Iterable[StreamEvent]) -> list[tuple[int, bytes]]:
    """Each event's (sequence number, frame): what ``write_frames`` and ``frame_commands`` take."""
    return [(e.sequence_number, frame(e)) for e in events]


def event_commands(response_id: str, events: Iterable[StreamEvent]) -> list[Command]:
    return frame_commands(response_id, framed(events))


def frame_commands(response_id: str, frames: Iterable[tuple[int, bytes]]) -> list[Command]:
    """XADDs of (sequence number, frame) pairs: frames the caller built (and may send to a client too)."""
    # The key and the entry ids (redis_keys.event_id) as bytes, ready to send.
    key = redis_keys.events(response_id).encode()
    return [("XADD", key, b"0-%d" % (sequence_number + 1), "f", data) for sequence_number, data in frames]


def packed_events(response_id: str, events: Iterable[StreamEvent]) -> list[Packed]:
    """``event_commands``, packed for the writer's script call as they are made (once per token)."""
    entries = [(b"0-%d" % (e.sequence_number + 1), frame(e)) for e in events]
    return pack_event_entries(redis_keys.events(response_id).encode(), entries)


def close_commands(response_id: str, status: str, ttl_seconds: int, *, rewritten: int | None = None) -> list[Command]:
    # ``*`` puts the end marker after every 0-N event id; a late event XADD then fails instead of
    # landing after the end. The journal is of no use once the response ended (and saved), nor the record of
    # the API process relaying it (relays.py), and the stream leaves the open streams with its end marker (a
    # lost end keeps it there: workers/unclosed.py).
    # ``rewritten``: the stream was lost and holds only these many events written anew (entries.REWRITTEN).
    key = redis_keys.events(response_id)
    marker = ("end", status) if rewritten is None else ("end", status, "rewritten", rewritten)
    return [
        ("XADD", key, "*", *marker),
        ("EXPIRE", key, ttl_seconds),
        ("DEL", redis_keys.journal(response_id)),
        ("DEL", redis_keys.relay(response_id)),
        ("SREM", redis_keys.OPEN_STREAMS, response_id),
    ]


def close_after(
    redis: SyncRedis, response_id: str, events: Iterable[StreamEvent], status: str, ttl_seconds: int, *,
    rewritten: bool = False,
) -> None:
    """Append ``events``, then the end marker and TTL, in one round trip, from a thread (the reaper's, or a
    worker's task thread ending a response it cannot run). An XADD refused (the stream ended meanwhile)
    is fine. ``rewritten``: the stream was lost, and ``events`` are all it holds now."""
    events = list(events)
    close = close_commands(response_id, status, ttl_seconds, rewritten=len(events) if rewritten else None)
    with redis.pipeline(transaction=False) as pipe:
        for command in event_commands(response_id, events) + close:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        pipe.execute(raise_on_error=False)


async def write_events(
    redis: Redis,
    response_id: str,
    events: Iterable[StreamEvent],
    *,
    close: str | None = None,
    ttl_seconds: int | None = None,
) -> None:
    """Append events (and, with ``close``, the end marker and TTL) in one round trip (API side)."""
    await write_frames(redis, response_id, framed(events), close=close, ttl_seconds=ttl_seconds)


async def write_frames(
    redis: Redis,
    response_id: str,
    frames: Iterable[tuple[int, bytes]],
    *,
    close: str | None = None,
    ttl_seconds: int | None = None,
    also: Iterable[Command] = (),
) -> None:
    """``write_events`` for events already framed: (sequence number, frame) pairs. ``ttl_seconds`` without
    ``close``: the stream expires unless a worker claims it (an accept's opening events). ``also``: commands
    sent after them in the same round trip (an accept's record of its relay)."""
    commands = frame_commands(response_id, frames)
    if close is not None:
        if ttl_seconds is None:
            raise TypeError("close=... needs ttl_seconds")
        commands += close_commands(response_id, close, ttl_seconds)
    elif ttl_seconds is not None:
        commands.append(("EXPIRE", redis_keys.events(response_id), ttl_seconds))
    commands += also
    errors = await run_commands(redis, commands)
    if errors:
        raise _write_error(response_id, commands, errors)


def _write_error(response_id: str, commands: list[Command], errors: dict[int, str]) -> EventWriteError:
    """``EventLogOverwritten`` when every failed command was refused for the stream's key holding another type
    (the others, its TTL, the journal's DEL, ran); else ``EventWriteError`` (Redis refusing writes: a 503)."""
    key = redis_keys.events(response_id)
    first = next(iter(errors.values()))
    if all(wrong_type(message) and commands[index][1] in (key, key.encode()) for index, message in errors.items()):
        return EventLogOverwritten(f"the event log key {key} holds something other than a stream ({first})")
    return EventWriteError(f"event log write failed for {response_id}: {first}")
