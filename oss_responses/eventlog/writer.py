"""Worker side of the event log: every response's events, batched into one pipelined write.

One :class:`EventWriter` lives on the worker's engine loop. ``append``/``close``/``append_journal``
only buffer commands; the first buffered command of a loop iteration starts a flush task, which runs
on the next iteration and sends everything buffered by then (all running responses' events of one
engine step) in ONE round trip (``bulk.run_commands``: one write of scripts, one per 1,000 commands,
so the client's cost is packing arguments, not a reply per command). A response's journal steps
(what another worker replays to take it over, ``workers/journal.py``) are one RPUSH per flush,
placed before every event of the flush: whatever prefix of a flush reaches Redis, the journal
covers every event in the stream. Flushes never overlap: stream ids must reach Redis in
order, so what is buffered while a flush is in flight goes in the next one (batches grow under load).

A failed write poisons its response: later ``append`` calls and ``drain`` raise
:class:`EventWriteError`, so a worker never writes a stream with a gap and then calls it finished.
The runner then leaves the response to a takeover: the journal in Redis says exactly what reached
it, so the worker that takes it over (once Redis answers again) writes what is missing and goes on.
"""

from __future__ import annotations

import asyncio
import logging
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from oss_responses import redis_keys
from oss_responses.eventlog.bulk import Command, run_commands
from oss_responses.eventlog.frames import StreamEvent, frame

log = logging.getLogger(__name__)

class EventWriteError(RuntimeError):
    """A buffered write of this response did not reach Redis."""


@dataclass
class _Batch:
    commands: list[Command] = field(default_factory=list)
    owners: list[str] = field(default_factory=list)  # response id of each command
    closing: set[str] = field(default_factory=set)
    # Journal steps per response, sent as ONE RPUSH per response per flush (not one per step).
    journal: dict[str, list[Any]] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def take_journal(self) -> None:
        """Put the journal RPUSHes first: before the events they produced, and before a close's DEL."""
        if self.journal:
            pushes = [
                ("RPUSH", redis_keys.journal(rid), json.dumps(steps, separators=(",", ":"), ensure_ascii=False))
                for rid, steps in self.journal.items()
            ]
            self.commands[:0] = pushes
            self.owners[:0] = list(self.journal)
            self.journal = {}


def event_commands(response_id: str, events: Iterable[StreamEvent]) -> list[Command]:
    # Once per token: the key and the entry ids (redis_keys.event_id) as bytes, ready to send.
    key = redis_keys.events(response_id).encode()
    return [("XADD", key, b"0-%d" % (e.sequence_number + 1), "f", frame(e)) for e in events]


def close_commands(response_id: str, status: str, ttl_seconds: int) -> list[Command]:
    # ``*`` puts the end marker after every 0-N event id; a late event XADD then fails instead of
    # landing after the end. The journal is of no use once the response ended (and saved).
    key = redis_keys.events(response_id)
    return [
        ("XADD", key, "*", "end", status),
        ("EXPIRE", key, ttl_seconds),
        ("DEL", redis_keys.journal(response_id)),
    ]


async def write_events(
    redis: Redis,
    response_id: str,
    events: Iterable[StreamEvent],
    *,
    close: str | None = None,
    ttl_seconds: int | None = None,
) -> None:
    """Append events (and, with ``close``, the end marker and TTL) in one round trip (API side)."""
    commands = event_commands(response_id, events)
    if close is not None:
        if ttl_seconds is None:
            raise TypeError("write_events(close=...) needs ttl_seconds")
        commands += close_commands(response_id, close, ttl_seconds)
    errors = await run_commands(redis, commands)
    if errors:
        raise EventWriteError(f"event log write failed for {response_id}: {next(iter(errors.values()))}")


class EventWriter:
    """Buffers stream writes of all responses; flushes them once per loop iteration, pipelined."""

    def __init__(self, redis: Redis, *, ttl_seconds: int) -> None:
        self._redis = redis
        self._ttl_seconds = ttl_seconds
        self._pending = _Batch()
        self._last_batch: dict[str, _Batch] = {}  # response id -> latest batch holding its writes
        self._failed: dict[str, BaseException] = {}
        self._closed: set[str] = set()
        self._flusher: asyncio.Task[None] | None = None

    def append(self, response_id: str, events: Iterable[StreamEvent]) -> None:
        self._buffer(response_id, event_commands(response_id, events))

    def close(self, response_id: str, status: str) -> None:
        """Buffer the end marker and the TTL; the stream then ends for every subscriber."""
        self._buffer(response_id, close_commands(response_id, status, self._ttl_seconds), closing=True)

    def append_journal(self, response_id: str, step: Any) -> None:
        """Buffer one journal step (JSON-able); it lands before the events buffered after it."""
        batch = self._pending
        steps = batch.journal.get(response_id)
        if steps is not None:  # the common case, once per token: checked and scheduled already
            steps.append(step)
            return
        self._raise_if_failed(response_id)
        batch.journal[response_id] = [step]
        self._last_batch[response_id] = batch
        self._start_flusher()

    async def flush(self) -> None:
        """Wait until everything buffered so far is in Redis (errors are per response: see drain)."""
        batch = self._pending
        if batch.commands or batch.journal:
            self._start_flusher()
            await batch.done.wait()
        elif self._flusher is not None:
            await asyncio.shield(self._flusher)

    async def drain(self, response_id: str) -> None:
        """Wait until this response's buffered writes are in Redis; raise if any of them failed.

        After ``close``, draining also forgets the response (its failure is reported once).
        """
        batch = self._last_batch.get(response_id)
        if batch is not None:
            await batch.done.wait()
        if response_id in self._closed:
            self._closed.discard(response_id)
            error = self._failed.pop(response_id, None)
            if error is not None:
                raise EventWriteError(f"event log write failed for {response_id}: {error}") from error
        self._raise_if_failed(response_id)

    def _buffer(self, response_id: str, commands: list[Command], *, closing: bool = False) -> None:
        if not closing:
            self._raise_if_failed(response_id)
        batch = self._pending
        batch.commands += commands
        batch.owners += [response_id] * len(commands)
        self._last_batch[response_id] = batch
        if closing:
            batch.closing.add(response_id)
            self._closed.add(response_id)
        self._start_flusher()

    def forget_failure(self, response_id: str) -> None:
        """A response starts (or is taken over) on this worker: an old failed write of it is history."""
        self._failed.pop(response_id, None)

    def _raise_if_failed(self, response_id: str) -> None:
        error = self._failed.get(response_id)
        if error is not None:
            raise EventWriteError(f"event log write failed for {response_id}: {error}") from error

    def _start_flusher(self) -> None:
        # create_task runs the flusher on the next loop iteration: every write buffered in this
        # iteration (one engine step, all responses) goes into the same pipeline.
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_all())

    async def _flush_all(self) -> None:
        try:
            while self._pending.commands or self._pending.journal:
                batch, self._pending = self._pending, _Batch()
                batch.take_journal()
                await self._send(batch)
        finally:
            self._flusher = None

    async def _send(self, batch: _Batch) -> None:
        try:
            errors: dict[int, str | Exception] = dict(await run_commands(self._redis, batch.commands))
        except Exception as exc:  # connection lost, ...: every response in the batch failed
            log.exception("event log flush of %d commands failed", len(batch.commands))
            errors = dict.fromkeys(range(len(batch.commands)), exc)
        for index, error in errors.items():
            owner = batch.owners[index]
            if owner not in self._failed:
                log.error("event log write for %s failed: %s", owner, error)
                self._failed[owner] = error if isinstance(error, Exception) else EventWriteError(error)
        for owner in set(batch.owners):
            if self._last_batch.get(owner) is batch:
                del self._last_batch[owner]
        # A closed response is forgotten here unless a failure waits for its drain.
        self._closed -= batch.closing - self._failed.keys()
        batch.commands.clear()
        batch.done.set()
