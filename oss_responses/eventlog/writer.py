"""Worker side of the event log: every response's events, batched into one pipelined write.

One :class:`EventWriter` lives on the worker's engine loop. ``append``/``close``/``append_journal``
only buffer commands; the first buffered command of a loop iteration schedules a flush, which runs
on the next iteration and sends everything buffered by then (all running responses' events of one
engine step) in ONE write (``bulk.script_calls``: one script call per 1,000 commands, so the cost
is packing arguments, not a reply per command). A response's journal steps (what another worker
replays to take it over, ``workers/journal.py``) are one RPUSH per flush, placed before every event
of the flush: whatever prefix of a flush reaches Redis, the journal covers every event in the stream.

The writes go on the writer's own connection (``pipe.RedisPipe``), so stream ids reach Redis in the
order they were written, and a flush need not wait for the one before it. That allows an early flush:
when translating one engine step's tokens takes longer than ``early_flush_seconds`` (many streams),
what is buffered so far is written at once, from ``append`` itself, instead of after the step's last
token. While a scheduled flush's replies are awaited, the next batch grows; their arrival sends it
(batches grow under load). Flushes and replies are loop callbacks, not tasks: at 8 streams, a task
to flush and one to await the replies per engine step cost ~6 us of the loop's CPU per token
(``bench/worker_ceiling.py --streams 8 --step-ms 7``: 46.5-47.5 us against 40.0-41.9).

A failed write poisons its response: later ``append`` calls and ``drain`` raise
:class:`EventWriteError`, so a worker never writes a stream with a gap and then calls it finished.
The runner then leaves the response to a takeover: the journal in Redis says exactly what reached
it, so the worker that takes it over (once Redis answers again) writes what is missing and goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from oss_responses import redis_keys
from oss_responses.eventlog.bulk import (
    CHUNK,
    SCRIPT,
    Packed,
    failed_commands,
    lease_lost,
    pack_command,
    pack_guard,
    pack_push,
    script_calls,
)
from oss_responses.eventlog.frames import StreamEvent
from oss_responses.eventlog.pipe import PipeBroken, RedisPipe
from oss_responses.eventlog.writes import EventWriteError, close_commands, packed_events
from oss_responses.metrics import EVENT_WRITE_FAILURES, EVENT_WRITE_SECONDS
from oss_responses.outage_log import OutageLog

log = logging.getLogger(__name__)
# A flush still missing replies this long after it was written (or a connection not made and greeted
# within it) met a silent network: a blackholed link, a lost NAT entry or load-balancer flow, where no
# RST ever comes and the kernel reports nothing for minutes (with data unacknowledged, ~15 min of TCP
# retries; a proxy that holds the bytes, never). Its connection is given up, as the API's hub gives up
# a read silent 10 s past its BLOCK (lane.py): without it every later flush waited behind it for good
# while the leases were renewed on other connections, so each response on the worker froze and none
# was taken over. A flush's replies take milliseconds; this leaves room for a slow link.
REPLY_SECONDS = 10.0
# Redis away (stopped, restarted, silent) is an outage, not a bug: the writer's own connection meets it first
# and tells it in a few WARNING lines (``OutageLog``), no traceback; each run it fails tells its own line as it
# is left to a takeover. A frozen Redis had cost three ERROR lines per outage here, plus one per response.
_OUTAGE_ERRORS = (RedisConnectionError, RedisTimeoutError, ConnectionError, TimeoutError)

# An engine step whose tokens take longer than this to translate ships what it has so far, so that the
# first responses of a step reach their clients while the loop translates the rest. Each early flush costs
# the loop more than its write (a reply to read, a wake). Alternated on 2026-12-06 against 2 ms: the median
# latency per event fell by 1.3 ms (bench/service.py b, 100 streams: 7.2/8.3/6.3 against 9.5/8.8/7.6 ms),
# for +1.5 to +2.5 us of loop CPU per token at saturation (bench/worker_ceiling.py: 45.5-46.6k against
# 49.6-52.8k tokens/s; paced like a GPU, --step-ms 6.7, no difference above the noise).
EARLY_FLUSH_SECONDS = 0.0005
_LOAD_SCRIPT = [b"SCRIPT", b"LOAD", SCRIPT.encode()]
_SERVER_INFO = [b"INFO", b"server"]


@dataclass(frozen=True)
class Fence:
    """A run's hold on its response: the lease key and the run's own token in it. Its writes land only
    while the lease holds that token (see ``EventWriter.fence``)."""

    lease_key: str
    token: str

    @cached_property
    def guard(self) -> Packed:
        return pack_guard(self.lease_key.encode(), self.token.encode())


class _Group:
    """One response's writes in a batch, under the fence they were buffered under."""

    __slots__ = ("commands", "fence", "journal", "owner")

    def __init__(self, response_id: str, fence: Fence | None) -> None:
        self.owner = (response_id, fence)  # what a failed command of it is reported against
        self.fence = fence
        self.commands: list[Packed] = []
        self.journal: list[Any] | None = None  # its journal steps: ONE RPUSH per response per flush


@dataclass(eq=False)  # hashed by identity: the writer holds the batches awaiting replies in a set
class _Batch:
    # Each response's writes apart from the other responses' (streams are independent), so that one
    # guard heads them all; a response whose fence changed within the batch (a run ended and the next
    # began on this worker) has its earlier group in ``retired``.
    groups: dict[str, _Group] = field(default_factory=dict)
    retired: list[_Group] = field(default_factory=list)
    closing: set[str] = field(default_factory=set)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    started: float | None = None  # when its first event or close was buffered (perf_counter)
    # Set when written: the commands in the order sent, and the (response, fence) each belongs to.
    commands: list[Packed] = field(default_factory=list)
    owners: list[tuple[str, Fence | None]] = field(default_factory=list)
    response_ids: set[str] = field(default_factory=set)

    @property
    def empty(self) -> bool:
        return not (self.groups or self.retired)

    def group(self, response_id: str, fence: Fence | None) -> _Group:
        """The response's group for writes under ``fence``."""
        group = self.groups.get(response_id)
        if group is None or group.fence is not fence:
            if group is not None:
                self.retired.append(group)
            group = self.groups[response_id] = _Group(response_id, fence)
        return group

    def lay_out(self, failed: Callable[[_Group], bool] = lambda group: False) -> None:
        """The commands to send: per response its guard (when fenced), its journal RPUSH (before the
        events it produced, and before a close's DEL), then its commands. Unfenced responses (tests,
        benches) go first: a failed guard skips everything up to the next one. A ``failed`` group is
        left out: an earlier write of its run failed, and what followed it must not land after a gap."""
        every = [*self.retired, *self.groups.values()]
        self.response_ids = {group.owner[0] for group in every}
        groups = [group for group in every if not failed(group)]
        if any(group.fence is None for group in groups):
            groups = [g for g in groups if g.fence is None] + [g for g in groups if g.fence is not None]
        out, owners = self.commands, self.owners
        for group in groups:
            response_id, fence = owner = group.owner
            commands = group.commands
            if group.journal is not None:
                commands.insert(0, pack_push(redis_keys.journal(response_id).encode(), _journal_json(group.journal)))
            if fence is not None and len(out) % CHUNK + len(commands) + 1 < CHUNK:  # the common case
                out.append(fence.guard)
                out += commands
                owners += [owner] * (len(commands) + 1)
            else:
                self._add(group, commands)
        self.groups, self.retired = {}, []

    def _add(self, group: _Group, commands: list[Packed]) -> None:
        """A group's commands behind its guard, and behind it again at the start of each script call
        (``bulk.CHUNK`` commands) the group runs on into: each call starts unguarded."""
        fence, owner = group.fence, group.owner
        while True:
            if fence is not None:
                self.commands.append(fence.guard)
                self.owners.append(owner)
                if len(self.commands) % CHUNK == 0:  # the guard ended a call: it must head the next
                    continue
            room = CHUNK - len(self.commands) % CHUNK
            if len(commands) <= room:  # the common case: the rest fits in this call
                self.commands += commands
                self.owners += [owner] * len(commands)
                return
            self.commands += commands[:room]
            self.owners += [owner] * room
            commands = commands[room:]


_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_FEED = '["feed",[%s]]'


def _journal_json(steps: list[Any]) -> bytes:
    """The steps as one JSON array. Nearly every step is a feed of token ids (one per response per
    engine step): written directly, as ``json`` would, without building an encoder for it."""
    return ("[" + ",".join([
        _FEED % ",".join(map(str, step[1])) if step[0] == "feed" else _JSON.encode(step) for step in steps
    ]) + "]").encode()


def _outcome(reply: asyncio.Future[Any]) -> Any:
    """A reply future's result, or its exception (as ``gather(return_exceptions=True)`` gives it)."""
    if reply.cancelled():
        return PipeBroken("the reply was cancelled")
    return reply.exception() or reply.result()


def _run_id(info: bytes) -> bytes:
    """The ``run_id`` of an ``INFO server`` reply: a new one each time the server starts."""
    for line in info.splitlines():
        if line.startswith(b"run_id:"):
            return line[len(b"run_id:"):].strip()
    return b""


class EventWriter:
    """Buffers stream writes of all responses; flushes them once per loop iteration, pipelined."""

    def __init__(self, redis: Redis, *, ttl_seconds: int, early_flush_seconds: float = EARLY_FLUSH_SECONDS,
                 reply_seconds: float = REPLY_SECONDS, outage: OutageLog | None = None) -> None:
        """``outage``: where Redis's outages are told; a worker's, shared with its other loops that retry Redis,
        so that they tell one outage once together."""
        self._redis = redis  # whose settings the writer's own connection copies
        self._outage = outage or OutageLog(log, "event writer: Redis")
        self._ttl_seconds = ttl_seconds
        self._early_flush_seconds = early_flush_seconds
        self._reply_seconds = reply_seconds
        # The connection whose loss the log has told: every flush in flight on it fails with it (early flushes
        # go out without waiting for the last one's replies), and one line says so for all of them.
        self._loss_told: RedisPipe | None = None
        self._pending = _Batch()
        self._last_batch: dict[str, _Batch] = {}  # response id -> latest batch holding its writes
        self._failed: dict[str, BaseException] = {}
        self._closed: set[str] = set()
        self._flush_scheduled = False
        self._in_flight: _Batch | None = None  # the scheduled flush's batch, until its replies came
        self._settling: set[_Batch] = set()  # taken from pending (written or connecting), not settled yet
        self._connecting: set[asyncio.Task[None]] = set()
        self._pipe: RedisPipe | None = None
        self._fences: dict[str, Fence] = {}  # response id -> the fence its writes are buffered under
        self._server: bytes | None = None  # the run id of the Redis server the writer last connected to
        self._written: set[str] = set()  # fenced responses whose run had a flush land on that server
        # Runs ended here (unfenced) with writes still buffered or unanswered, which had failed or written on
        # the server: those writes stay theirs (``_run_failed``) until they settled.
        self._ended: dict[str, Fence] = {}

    def append(self, response_id: str, events: Iterable[StreamEvent]) -> None:
        self._buffer(response_id, packed_events(response_id, events))

    def close(self, response_id: str, status: str, *, ttl_seconds: int | None = None) -> None:
        """Buffer the end marker and the TTL (the writer's, or ``ttl_seconds``); the stream then ends for every
        subscriber."""
        commands = close_commands(response_id, status, ttl_seconds or self._ttl_seconds)
        self._buffer(response_id, [pack_command(command) for command in commands], closing=True)

    def append_journal(self, response_id: str, step: Any) -> None:
        """Buffer one journal step (JSON-able); it lands before the events buffered after it."""
        batch = self._pending
        fence = self._fences.get(response_id)
        group = batch.groups.get(response_id)
        if group is not None and group.journal is not None and group.fence is fence:
            group.journal.append(step)  # the common case, once per token: checked and scheduled already
            return
        self._raise_if_failed(response_id)
        group = batch.group(response_id, fence)
        if group.journal is None:
            group.journal = []
        group.journal.append(step)
        self._last_batch[response_id] = batch
        self._schedule_flush()

    async def flush(self) -> None:
        """Wait until everything buffered so far is in Redis (errors are per response: see drain)."""
        batch = self._pending
        if not batch.empty:
            self._schedule_flush()
            await batch.done.wait()
        for settling in list(self._settling):  # earlier flushes still awaiting their replies
            await settling.done.wait()

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

    async def aclose(self) -> None:
        """Flush, then close the writer's connection (a later flush would open a new one)."""
        await self.flush()
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None

    def _buffer(self, response_id: str, commands: list[Packed], *, closing: bool = False) -> None:
        if not closing:
            self._raise_if_failed(response_id)
        batch = self._pending
        fence = self._fences.get(response_id)
        group = batch.groups.get(response_id)
        if group is None or group.fence is not fence:
            group = batch.group(response_id, fence)
        group.commands += commands
        self._last_batch[response_id] = batch
        if closing:
            batch.closing.add(response_id)
            self._closed.add(response_id)
        if batch.started is None:
            batch.started = time.perf_counter()
            self._schedule_flush()
        elif time.perf_counter() - batch.started >= self._early_flush_seconds:
            self._flush_early(batch)

    def _flush_early(self, batch: _Batch) -> None:
        pipe = self._pipe
        if pipe is not None and pipe.usable:  # else the scheduled flush (re)connects first
            self._pending = _Batch()
            self._settling.add(batch)
            self._write(pipe, batch)

    def fence(self, response_id: str, fence: Fence) -> None:
        """A run took the response's lease: from now on what is buffered for the response lands only
        while the lease holds the run's token, checked in Redis with the writes (a guard heads each
        response's writes in a flush). A run that lost its lease (its worker paused past it) then
        writes nothing after the run that took the response over: neither its events nor, worse, a
        journal step, which a later takeover would replay. An old failed write is history."""
        self._fences[response_id] = fence
        self._failed.pop(response_id, None)
        self._written.discard(response_id)
        self._ended.pop(response_id, None)

    def unfence(self, response_id: str, fence: Fence) -> None:
        """The run that holds ``fence`` ended (what it buffered keeps its guard). What it left buffered or
        unanswered stays its run's: dropped if a write of that run failed, or if the writer reconnects to
        another server run before it is sent. A run left for a takeover ends while the writer may still be
        connecting for the batch buffered behind its lost flush (a slow connect, a failover): that batch
        landed after the gap, on the same server or on one restored with the run's lease."""
        if self._fences.get(response_id) == fence:
            del self._fences[response_id]
            if response_id in self._last_batch and (response_id in self._failed or response_id in self._written):
                self._ended[response_id] = fence
            self._written.discard(response_id)

    def _raise_if_failed(self, response_id: str) -> None:
        error = self._failed.get(response_id)
        if error is not None:
            raise EventWriteError(f"event log write failed for {response_id}: {error}") from error

    def _schedule_flush(self) -> None:
        # Called soon, not now: every write buffered in this loop iteration (one engine step, all
        # responses) goes into the same flush.
        if not self._flush_scheduled and self._in_flight is None:
            self._flush_scheduled = True
            # An empty context: the flush serves every response, its log lines belong to none of them.
            asyncio.get_running_loop().call_soon(self._flush_pending, context=contextvars.Context())

    def _flush_pending(self) -> None:
        """Write what is buffered, unless the last flush still awaits its replies: then the batch
        grows until they come (``_replied`` flushes it), so batches grow under load."""
        self._flush_scheduled = False
        batch = self._pending
        if self._in_flight is not None or batch.empty:
            return
        self._pending, self._in_flight = _Batch(), batch
        self._settling.add(batch)
        pipe = self._pipe
        if pipe is not None and pipe.usable:
            self._write(pipe, batch)
            return
        task = asyncio.get_running_loop().create_task(self._connect_and_write(batch), context=contextvars.Context())
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _connect_and_write(self, batch: _Batch) -> None:
        try:
            pipe = await self._connected_pipe()
        except Exception as exc:  # Redis unreachable: every response in the batch failed
            self._tell_failure(exc, "the event writer could not connect to Redis")
            batch.lay_out()  # its journal's owners fail too
            self._done(batch, dict.fromkeys(range(len(batch.commands)), exc))
            return
        self._write(pipe, batch)

    async def _connected_pipe(self) -> RedisPipe:
        if self._pipe is None or not self._pipe.usable:
            self._pipe = None
            # The script is loaded on every new connection: a restarted Redis has lost it.
            opening = RedisPipe.open(self._redis, [_LOAD_SCRIPT, _SERVER_INFO])
            try:
                pipe = await asyncio.wait_for(opening, self._reply_seconds)
            except TimeoutError as exc:  # named, or its outage line says only "TimeoutError"
                raise TimeoutError(f"no answer to a connect within {self._reply_seconds:.1f}s") from exc
            self._outage.answered()
            self._check_server(_run_id(pipe.setup_replies[1]))
            self._pipe = pipe
        return self._pipe

    def _tell_failure(self, exc: Exception, message: str, *args: object, waited: float = 0.0) -> None:
        """An outage told with the others (its first try, a reminder, its end); anything else with its
        traceback: a bug, or a Redis that answered what the writer did not expect. ``waited``: how long the
        failed flush had awaited its replies."""
        if isinstance(exc, _OUTAGE_ERRORS):
            self._outage.failed(exc, waited=waited)
        else:
            log.exception(message, *args)

    def _check_server(self, server: bytes) -> None:
        """A new connection that reaches another Redis server run (restarted, or failed over to a replica)
        may find the writes of the running responses gone: a restart from a snapshot or an AOF synced each
        second, a replica that lacked the primary's last writes. A run writing on would leave a gap in its
        stream and journal (its lease can come back too, from the snapshot: the rollback probe saw a run
        write event 9 after a restored 6, a gap its takeovers could not replay). Every run that wrote on the
        old server fails instead, and is taken over from what the server holds now; a run fenced since (a
        takeover after the restart) writes on."""
        if self._server is not None and server != self._server:
            runs = [response_id for response_id in (*self._written, *self._ended) if response_id not in self._failed]
            if runs:  # a known condition, as the outage before it: no ERROR
                log.warning("Redis restarted or failed over (its run id changed): the %d running responses of this "
                          "worker are left to takeovers from what it holds now", len(runs))
            error = EventWriteError("Redis restarted or failed over: this run's earlier writes may be gone")
            for response_id in runs:
                self._failed[response_id] = error
            self._written.clear()  # a run fenced since writes on the server it finds
        self._server = server

    def _write(self, pipe: RedisPipe, batch: _Batch) -> None:
        """Put the batch on the wire now; it is settled once its replies came."""
        # A run whose earlier flush failed (a lost connection, perhaps never delivered) writes nothing
        # more: buffered while that flush awaited its replies, its next events and journal steps went
        # out on the new connection after the lost ones, leaving a gap in its stream and journal (the
        # network probe: its takeovers' replays ran short of the stream, XADD refused them, and the
        # response failed worker_lost after 4 takeovers).
        batch.lay_out(self._run_failed)
        payload, count = script_calls(batch.commands)
        replies = pipe.send(payload, count)
        if not replies:  # an early flush of a batch that only ever got empty appends
            self._done(batch, {})
            return
        # Redis answers in order, and a broken pipe fails the replies in order: the last one done
        # means all are.
        deadline = asyncio.get_running_loop().call_later(
            self._reply_seconds, self._give_up, pipe, replies[-1], context=contextvars.Context()
        )
        replies[-1].add_done_callback(
            partial(self._replied, pipe, batch, replies, time.perf_counter(), deadline), context=contextvars.Context()
        )

    def _run_failed(self, group: _Group) -> bool:
        response_id, fence = group.owner
        if response_id not in self._failed:
            return False
        # Equal, not the same object: a runner's fence is built anew each time it is asked for (``Run.fence``), and
        # the one a run ended with, by identity, was never the one its writes were buffered under.
        return self._fences.get(response_id) == fence or (fence is not None and self._ended.get(response_id) == fence)

    def _give_up(self, pipe: RedisPipe, last_reply: asyncio.Future[Any]) -> None:
        """A flush's replies did not come within ``REPLY_SECONDS``: its connection is closed, which fails
        every reply still awaited on it (this flush's and later ones'), and the next flush reconnects."""
        if not last_reply.done():  # told as the outage's error by the flushes it fails (``_replied``)
            pipe.abort(f"no reply within {self._reply_seconds:.1f}s")

    def _replied(
        self, pipe: RedisPipe, batch: _Batch, replies: list[asyncio.Future[Any]], started: float,
        deadline: asyncio.TimerHandle, _: object,
    ) -> None:
        deadline.cancel()
        try:
            # Every reply retrieved, errors included: a broken pipe fails them all at once.
            errors: dict[int, str | Exception] = dict(failed_commands([_outcome(reply) for reply in replies]))
        except Exception as exc:  # connection lost, or a whole script call refused: the batch failed
            if pipe is not self._loss_told or not isinstance(exc, _OUTAGE_ERRORS):
                self._tell_failure(exc, "event log flush of %d commands failed", len(batch.commands),
                                   waited=time.perf_counter() - started)
            if isinstance(exc, _OUTAGE_ERRORS):  # the flushes after it on this connection fail alike: told
                self._loss_told = pipe
            errors = dict.fromkeys(range(len(batch.commands)), exc)
            if self._pipe is pipe:  # the batches written after it fail as well; the next flush reconnects
                self._pipe = None
                pipe.close()
        EVENT_WRITE_SECONDS.observe(time.perf_counter() - started)
        self._done(batch, errors)

    def _done(self, batch: _Batch, errors: dict[int, str | Exception]) -> None:
        """Settle a written batch; if it was the scheduled flush's, what was buffered meanwhile goes next."""
        try:
            self._settling.discard(batch)
            self._settle(batch, errors)
        finally:  # whatever happened, later flushes must not wait for this one forever
            if batch is self._in_flight:
                self._in_flight = None
                self._flush_pending()

    def _settle(self, batch: _Batch, errors: dict[int, str | Exception]) -> None:
        if errors:
            EVENT_WRITE_FAILURES.inc()
        for index, error in errors.items():
            owner, fence = batch.owners[index]
            if fence is not None and self._fences.get(owner) != fence:
                continue  # written for a run that has ended here since: the response's new run did not fail
            if owner not in self._failed:
                if lease_lost(error):  # its run was taken over (paused past its lease): refused by design
                    log.warning("event log write for %s refused: %s", owner, error, extra={"response_id": owner})
                elif isinstance(error, _OUTAGE_ERRORS):  # told once above; its run tells its own end
                    log.debug("event log write for %s failed: %s", owner, error, extra={"response_id": owner})
                else:
                    log.error("event log write for %s failed: %s", owner, error, extra={"response_id": owner})
                self._failed[owner] = error if isinstance(error, Exception) else EventWriteError(error)
        for owner in batch.response_ids:
            if self._last_batch.get(owner) is batch:
                del self._last_batch[owner]
                if self._ended:  # its ended run's last writes settled
                    self._ended.pop(owner, None)
            if owner in self._fences:
                self._written.add(owner)
        # A closed response is forgotten here unless a failure waits for its drain.
        self._closed -= batch.closing - self._failed.keys()
        batch.commands.clear()
        batch.done.set()
