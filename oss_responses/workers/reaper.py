"""The reaper: no response stays ``in_progress`` forever.

A worker's runner holds a response's lease while it runs it (and took it before the response went
``in_progress``). So a response ``in_progress`` whose lease is gone lost its worker (SIGKILL, OOM,
host loss). Every ``reaper_interval_seconds`` one worker (a short Redis lock elects it) looks for such
responses and dispatches each one's task again, once (``resume(id)`` is set while that task waits):
the worker that gets it takes the response over from its journal (``runner``), so detection takes
about ``lease_seconds`` and never waits for Celery's visibility timeout.

A task can be lost on its way (a worker that shuts down can pop a message its consumer no longer
takes: seen when two front ends stopped at once, one handing a response off to a queue the other was
still reading). So a dispatch waits at most ``resume_seconds`` for a worker: then it is dispatched
again. A handoff's mark (``HANDOFF``, set for ``event_ttl_seconds`` so that the takeover is not
counted as a loss) is kept as it is, and only its age (read from its TTL) decides.

A response can end in SQL while its stream's end marker never reaches Redis (Redis down at that
moment, the worker killed between the two). Every stream a worker claimed is listed as open until its
end marker; a pass also ends the open streams of responses no longer running whose lease is free
(``workers/unclosed.py``), so no client follows such a stream until its TTL.

A pass also cancels the running foreground responses whose API process is gone (killed: it could not cancel
them on its clients' disconnects; ``relays.py``): it reads which process relays each one with the leases,
and that process's liveness key.

It also sweeps: a response still ``queued`` after ``stale_queued_seconds`` may have lost its task (a
Redis that kept no AOF, a flushed queue); its task is sent again, once per that period, while a worker
announces its model (a queue nobody consumes keeps what it holds). A duplicate of
a task that was only waiting is harmless: the second run finds the response leased or ended. The sweep
and the purge of expired event logs run every tenth of ``stale_queued_seconds`` (a minute at most),
not every pass.

A pass is cheap because it runs every second in every worker, busy or idle: one SQL query and one
Redis round trip for the leases of all running responses and the open streams. Measured on an idle
stack (bench/idle.py), the reaper had been most of an idle worker's CPU: three SQL statements a
second, and a Redis call per running response.

Without a dispatcher (in-process tests) the reaper fails such responses instead: SQL status ``failed``
(or the row deleted when ``store`` is false), a ``response.failed`` event continuing the stream's
sequence, then the stream's end marker, so every client stream ends. It takes the response's lease
itself while it does this, so it cannot race a runner.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from openai.types.responses import Response, ResponseFailedEvent
from redis import Redis
from redis.exceptions import ResponseError

from oss_responses import redis_keys
from oss_responses.announcements import ready_workers
from oss_responses.cancel_request import cancel_everywhere
from oss_responses.eventlog.writes import close_after
from oss_responses.harmony.emitter import EventEmitter
from oss_responses.harmony.lifecycle import response_error
from oss_responses.metrics import REAPER_ACTIONS
from oss_responses.outage_log import StoreOutages
from oss_responses.owned_keys import RELEASE_IF_OWNED
from oss_responses.pass_lock import release_pass_lock, take_pass_lock
from oss_responses.redis_refusals import DELETE_IF_OTHER_TYPE, wrong_type
from oss_responses.relays import GoneRelays, alive_instances, as_text
from oss_responses.statuses import ACTIVE_STATUSES, Status
from oss_responses.storage import (
    Database,
    ResponseRecord,
    active_among,
    get_response,
    list_in_progress_ids,
    list_stale_queued,
    purge_expired_event_logs,
    save_turn,
)
from oss_responses.storage.retention import purge_delivery_log_older_than, purge_responses_older_than
from oss_responses.storage.webhook_deliveries import DeliveryRow, ended_with_deliveries
from oss_responses.webhooks.notify import WebhookNotifier, log_rows
from oss_responses.wire import response_json, wire_json
from oss_responses.workers.ended import planned_webhooks, response_ended
from oss_responses.workers.job import stored_response
from oss_responses.workers.lease import UnreleasedLeases
from oss_responses.workers.outage import unreachable
from oss_responses.workers.stream_tail import next_from_tail
from oss_responses.workers.unclosed import end_unclosed_stream

log = logging.getLogger(__name__)

HANDOFF = "handoff"  # the value of resume(id) while a handed-off response waits for a worker

# KEYS: resume. ARGV: the wait (s) before a dispatch is repeated, the handoff mark, its TTL (s).
# 1: dispatch now (there was no mark: marked "reaper" for the wait). 2: dispatch a handoff again (its
# mark is older than the wait: its TTL renewed, so that the next repeat is a wait later). 0: a
# dispatch is waiting already. 3: dispatch now, the key held another type (overwritten: by hand, another
# application, a bug) and is replaced by the mark; its GET raised WRONGTYPE, which stopped the whole pass.
_MARK_DISPATCH = """
local mark = redis.pcall('GET', KEYS[1])
if type(mark) == 'table' and mark.err then
  redis.call('SET', KEYS[1], 'reaper', 'EX', ARGV[1])
  return 3
end
if not mark then
  redis.call('SET', KEYS[1], 'reaper', 'EX', ARGV[1])
  return 1
end
if mark == ARGV[2] and tonumber(ARGV[3]) - redis.call('TTL', KEYS[1]) >= tonumber(ARGV[1]) then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  return 2
end
return 0
"""

REAPER_LOCK = redis_keys.REAPER_LOCK


def resume_wait_seconds(lease_seconds: float) -> int:
    """How long a dispatched takeover may wait for a worker before it is dispatched again."""
    return max(60, int(lease_seconds * 4))
WORKER_LOST_MESSAGE = "worker_lost: the worker running this response stopped before it finished"
LEASE_OVERWRITTEN_MESSAGE = (
    "worker_lost: this response's lease in Redis was overwritten (its key holds something other than a lease: set "
    "by hand, by another application or by a bug), so no worker can run it; it cannot be continued"
)


def failed_response(record: ResponseRecord, message: str = WORKER_LOST_MESSAGE, code: str = "server_error") -> Response:
    """The record's Response failed; a stored JSON that does not validate still fails (as a placeholder)."""
    error = response_error(code, message)
    return stored_response(record).model_copy(update={"status": "failed", "error": error})


def next_sequence_number(redis: Redis, response_id: str) -> int | None:
    """The sequence number after the stream's last event; None when the stream is already closed."""
    return next_from_tail(redis.xrevrange(redis_keys.events(response_id), count=1))


def close_with_failure(redis: Redis, response_id: str, response: Response, ttl_seconds: int) -> None:
    """Append ``response.failed`` after the last event, then the end marker (one round trip). A stream Redis
    lost (every accepted response's holds its opening events) gets it alone, its end marked rewritten: a
    follower that had read the lost stream is past its id, and gets an ``error`` event instead of a
    clean end with no terminal event (the Redis-limits probe: FLUSHALL and evictions ended streams so). A key
    that holds something else (WRONGTYPE) is left as it is, its readers told ``event_log_lost``; the end's other
    commands run (its TTL, the journal's DEL, the open streams' SREM)."""
    try:
        sequence_number = next_sequence_number(redis, response_id)
    except ResponseError as exc:
        if not wrong_type(exc):
            raise
        log.warning("the event log key %s holds something other than a stream: %s failed without its end marker",
                    redis_keys.events(response_id), response_id)
        close_after(redis, response_id, [], "failed", ttl_seconds)
        return
    if sequence_number is None:
        return
    event = EventEmitter(sequence_number).emit(ResponseFailedEvent, response=response)
    close_after(redis, response_id, [event], "failed", ttl_seconds, rewritten=sequence_number == 0)


def end_failed(
    db: Database, redis: Redis, webhooks: WebhookNotifier | None, record: ResponseRecord, response: Response,
    ttl_seconds: int, from_statuses: Iterable[Status] = ACTIVE_STATUSES,
) -> bool:
    """End the response ``failed``: saved with its webhooks, its stream given ``response.failed`` and its end,
    its end announced; False if it had ended already (or is in none of ``from_statuses``)."""
    planned = planned_webhooks(webhooks, record.id, "failed", background=record.background)
    if not store_failure(db, record.id, record.store, response, log_rows(planned), from_statuses):
        return False
    close_with_failure(redis, record.id, response, ttl_seconds)
    response_ended(webhooks, record.model, "failed", planned)
    return True


def store_failure(
    db: Database, response_id: str, store: bool, response: Response, webhooks: Sequence[DeliveryRow] = (),
    from_statuses: Iterable[Status] = ACTIVE_STATUSES,
) -> bool:
    """Save the response failed (deleted when ``store`` is false), its ``webhooks`` logged pending with it;
    False if it had ended already (or is in none of ``from_statuses``)."""
    error = wire_json(response.error) if response.error else None
    return db.run(
        ended_with_deliveries, webhooks, save_turn, response_id, store=store, status="failed",
        response=response_json(response), output_messages=[], error=error, from_statuses=from_statuses,
    )


RETENTION_BATCH = 500
RETENTION_BATCHES = 10


class Reaper:
    def __init__(
        self, db: Database, redis: Redis, *, worker_id: str, interval_seconds: float, lease_seconds: float,
        event_ttl_seconds: int, dispatch: Callable[[str, str, dict[str, Any] | None], None] | None = None,
        stale_queued_seconds: int = 600, webhooks: WebhookNotifier | None = None,
        retention_seconds: int = 0, clock: Callable[[], float] = time.monotonic,
        outages: StoreOutages | None = None, unreleased: UnreleasedLeases | None = None,
        unstored_ttl_seconds: int | None = None,
    ) -> None:
        self.db = db
        self.redis = redis
        self.owner = f"reaper:{worker_id}:{uuid.uuid4().hex[:8]}"
        self.interval = interval_seconds
        self.lease_ms = max(1, int(lease_seconds * 1000))
        self.ttl_seconds = event_ttl_seconds
        # A store=false response's stream, ended here, is kept as long as its worker's end keeps it
        # (``Settings.stream_ttl_seconds``).
        self.unstored_ttl_seconds = unstored_ttl_seconds or event_ttl_seconds
        self.dispatch = dispatch
        self.resume_seconds = resume_wait_seconds(lease_seconds)
        self.stale_queued_seconds = stale_queued_seconds
        self.retention_seconds = retention_seconds
        # The sweep and the purge look for what takes minutes to appear: not every pass.
        self.housekeeping_seconds = max(interval_seconds, min(60.0, stale_queued_seconds / 10))
        self._housekept_at: float | None = None
        self._clock = clock
        self.webhooks = webhooks
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Its passes' outages, told with the worker's other loops that retry the same stores.
        self.outages = outages or StoreOutages(log)
        self._passed = False  # the last pass won the lock and went through (the database answered it)
        # This worker's leases that an outage kept it from releasing: released by each pass, in every worker
        # (not only the one that wins the lock), before the lock's holder looks for responses without a lease.
        self.unreleased = unreleased
        self.gone_relays = GoneRelays(clock)  # the API processes found without their liveness key, and since when

    def reap_once(self) -> list[str]:
        """One pass (if this worker wins the lock); the ids it failed."""
        lock_ms = max(1000, int(self.interval * 1000))
        self._passed = False
        if self.unreleased:
            released = self.unreleased.release(self.redis)
            if released:
                log.info("released %d lease%s that Redis's outage had kept: their responses' takeovers can start",
                         released, "" if released == 1 else "s")
        if not take_pass_lock(self.redis, REAPER_LOCK, self.owner, lock_ms):
            return []
        try:
            running = self.db.run(list_in_progress_ids)
            lost, open_streams, relays = self._survey(running)
            handled = self._each(lost, self.reap)
            handled += self._each(self.orphaned(relays), self.cancel_orphaned)
            handled += self._each(self.unclosed(sorted(open_streams.difference(running))), self.end_stream)
            if self._housekeeping_due():
                if self.dispatch is not None:
                    handled += self.sweep_queued()
                self.db.run(purge_expired_event_logs)  # their tombstones in Redis expired with them
                self.purge_retained()
            self._passed = True
            return handled
        finally:
            release_pass_lock(self.redis, REAPER_LOCK, self.owner)

    def _each(self, response_ids: Iterable[str], act: Callable[[str], bool]) -> list[str]:
        """Those of ``response_ids`` that ``act`` handled. One that raises (a bug, a key of its own holding
        something unforeseen) is logged and passed over: it stopped the whole pass, every pass, so that every
        lost response, unclosed stream and housekeeping task behind it waited for good. An outage still ends
        the pass (every response would meet it: a line per pass, not one per response)."""
        handled = []
        for response_id in response_ids:
            try:
                if act(response_id):
                    handled.append(response_id)
            except Exception as exc:
                if unreachable(exc):
                    raise
                log.exception("reaper could not handle %s: passed over, the pass goes on", response_id)
        return handled

    def _survey(self, running: list[str]) -> tuple[list[str], set[str], dict[str, str]]:
        """The running responses whose lease is gone, the open streams, and the API process relaying each running
        foreground response (``relays.py``), in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            if running:
                pipe.mget([redis_keys.lease(rid) for rid in running])
                pipe.mget([redis_keys.relay(rid) for rid in running])
            pipe.smembers(redis_keys.OPEN_STREAMS)
            *per_response, members = pipe.execute(raise_on_error=False)
        for reply in (*per_response, members):
            if isinstance(reply, Exception) and not (reply is members and wrong_type(reply)):
                raise reply
        if isinstance(members, Exception):
            members = self._replace_open_streams()
        holders, relayed_by = per_response or ([], [])
        lost = [rid for rid, holder in zip(running, holders, strict=True) if holder is None]
        relays = {rid: instance for rid, relay in zip(running, relayed_by, strict=True)
                  if (instance := as_text(relay)) is not None}
        return lost, {member.decode() for member in members}, relays

    def orphaned(self, relays: dict[str, str]) -> list[str]:
        """The running foreground responses whose API process has been gone for ``GONE_AFTER_SECONDS`` and that
        no cancel was asked for yet."""
        gone = self.gone_relays.gone(alive_instances(self.redis, relays.values()))
        orphans = sorted(rid for rid, instance in relays.items() if instance in gone)
        if not orphans:
            return []
        flagged = self.redis.mget([redis_keys.cancel(rid) for rid in orphans])
        return [rid for rid, flag in zip(orphans, flagged, strict=True) if flag is None]

    def cancel_orphaned(self, response_id: str) -> bool:
        """Cancel a foreground response whose API process is gone, as its client's disconnect would have: the
        worker running it stops it and ends it ``cancelled`` (a takeover finds the flag)."""
        log.warning("%s runs for a client of an API process that is gone (killed, or its host lost): cancelling it",
                    response_id)
        cancel_everywhere(self.redis, response_id, self.ttl_seconds)
        REAPER_ACTIONS.labels("relay_lost").inc()
        return True

    def _replace_open_streams(self) -> set[bytes]:
        """The open streams' key holds another type (overwritten by hand, another application or a bug): every
        claim's and cancel's SADD and every pass's SMEMBERS were refused, for every response (an end's SREM counts
        as done: ``eventlog/bulk.py``). What it listed is lost with it (a stream among them whose end was lost
        waits for its TTL); it is deleted, so that claims and cancels list streams again."""
        log.warning("the open streams key %s held something other than a set (overwritten by hand, another "
                    "application or a bug): deleted; streams it listed whose end was lost wait for their TTL",
                    redis_keys.OPEN_STREAMS)
        self.redis.eval(DELETE_IF_OTHER_TYPE, 1, redis_keys.OPEN_STREAMS, "set")
        return set()

    def unclosed(self, response_ids: list[str]) -> list[str]:
        """Those of ``response_ids`` (listed open, not running) with no lease and no longer waiting in SQL: the
        candidates whose streams may have lost their end. Read before any lease is taken: the lease taken to look
        at a queued one (its worker's start had met the database away and let its lease go) made that response's
        retried task find it held and give up (``leased_elsewhere``), the response left queued, its client
        waiting, until the stale sweep."""
        unleased = self.unleased(response_ids)
        waiting = self.db.run(active_among, unleased)
        return [response_id for response_id in unleased if response_id not in waiting]

    def unleased(self, response_ids: list[str]) -> list[str]:
        """Those of ``response_ids`` whose lease is gone, in one round trip (``reap`` checks again)."""
        if not response_ids:
            return []
        leases = self.redis.mget([redis_keys.lease(rid) for rid in response_ids])
        return [rid for rid, holder in zip(response_ids, leases, strict=True) if holder is None]

    def purge_retained(self) -> int:
        """Delete the ended responses older than ``retention_seconds``, a batch at a time, for at most
        ``RETENTION_BATCHES`` batches a pass: a backlog (retention just turned on) goes over several passes
        rather than holding the reaper's lock."""
        if not self.retention_seconds:
            return 0
        purged = self._purge_in_batches(purge_responses_older_than)
        if purged:
            log.info("deleted %d responses created over %ds ago (retention)", purged, self.retention_seconds)
        # The deliveries of responses a client deleted (a DELETE keeps them), which no response's purge takes.
        logged = self._purge_in_batches(purge_delivery_log_older_than)
        if logged:
            log.info("deleted %d webhook deliveries logged over %ds ago (retention)", logged, self.retention_seconds)
        return purged

    def _purge_in_batches(self, purge: Callable[..., int]) -> int:
        """``purge`` (rows older than the retention) a batch at a time, ``RETENTION_BATCHES`` at most."""
        age = timedelta(seconds=self.retention_seconds)
        purged = 0
        for _ in range(RETENTION_BATCHES):
            batch = self.db.run(purge, age, limit=RETENTION_BATCH)
            purged += batch
            if batch < RETENTION_BATCH:
                break
        return purged

    def _housekeeping_due(self) -> bool:
        now = self._clock()
        if self._housekept_at is not None and now - self._housekept_at < self.housekeeping_seconds:
            return False
        self._housekept_at = now
        return True

    def reap(self, response_id: str) -> bool:
        """Take over (or fail) one response if nobody holds its lease; True if it did."""
        if self.dispatch is not None:
            return self._dispatch_takeover(response_id)
        return self._leased(response_id, self._fail)

    def end_stream(self, response_id: str) -> bool:
        """End the open stream of a response that ended (``workers/unclosed.py``); True if it did."""
        end = partial(end_unclosed_stream, self.db, self.redis, ttl_seconds=self.ttl_seconds,
                      unstored_ttl_seconds=self.unstored_ttl_seconds)
        ended = self._leased(response_id, end)
        if ended:
            REAPER_ACTIONS.labels("stream_ended").inc()
        return ended

    def _leased(self, response_id: str, act: Callable[[str], bool]) -> bool:
        """``act(response_id)`` while holding its lease (so that no worker runs it meanwhile); False if
        another holds it."""
        lease_key = redis_keys.lease(response_id)
        if not self.redis.set(lease_key, self.owner, nx=True, px=self.lease_ms):
            return False
        try:
            return act(response_id)
        finally:
            self.redis.eval(RELEASE_IF_OWNED, 1, lease_key, self.owner)

    def sweep_queued(self) -> list[str]:
        """Send again the task of every response queued for longer than ``stale_queued_seconds``."""
        stale = self.db.run(list_stale_queued, timedelta(seconds=self.stale_queued_seconds))
        # A model no worker serves keeps its task waiting in the queue: a copy a period would pile up
        # there (counted against the model's queue limit) until a worker came and ran them all.
        served = ready_workers(self.redis) if stale else {}
        models = dict(stale)
        return self._each([response_id for response_id, model in stale if served.get(model)],
                          lambda response_id: self._send_again(response_id, models[response_id]))

    def _send_again(self, response_id: str, model: str) -> bool:
        assert self.dispatch is not None
        resume = redis_keys.resume(response_id)
        if not self.redis.set(resume, "sweeper", nx=True, ex=self.stale_queued_seconds):
            if self.redis.type(resume) in (b"string", "string", b"none", "none"):
                return False  # another worker's sweep sent it this period (or its mark just expired)
            # Overwritten with another type (by hand, another application, a bug): it has no TTL, and SET NX
            # found it each period, so the response's lost task was never sent again. Replaced by the mark.
            log.warning("the resume mark key %s held something other than a mark (overwritten by hand, another "
                        "application or a bug): replaced", resume)
            self.redis.set(resume, "sweeper", ex=self.stale_queued_seconds)
        log.warning("%s is still queued after %ds: sending its task again", response_id, self.stale_queued_seconds)
        self.dispatch(response_id, model, None)
        REAPER_ACTIONS.labels("requeued_stale").inc()
        return True

    def _dispatch_takeover(self, response_id: str) -> bool:
        assert self.dispatch is not None
        lease_type = self.redis.type(redis_keys.lease(response_id))
        if lease_type in (b"string", "string"):  # leased again since the survey: nothing to do
            return False
        if lease_type not in (b"none", "none"):
            return self._fail_overwritten_lease(response_id)
        resume = redis_keys.resume(response_id)
        marked = self.redis.eval(_MARK_DISPATCH, 1, resume, self.resume_seconds, HANDOFF, self.ttl_seconds)
        if not marked:
            return False  # its takeover (or a handoff) is queued already, for less than resume_seconds
        record = self.db.run(get_response, response_id)
        if record is None or record.status != "in_progress":
            self.redis.delete(resume)
            return False
        if marked == 2:
            log.warning("%s was handed off %ds ago and no worker took it: dispatching it again",
                        response_id, self.resume_seconds)
        elif marked == 3:
            log.warning("the resume mark key %s held something other than a mark (overwritten by hand, another "
                        "application or a bug): replaced; %s lost its worker: dispatching its takeover",
                        resume, response_id)
        else:
            log.warning("%s lost its worker: dispatching its takeover", response_id)
        self.dispatch(response_id, record.model, None)
        REAPER_ACTIONS.labels("takeover_dispatched").inc()
        return True

    def _fail_overwritten_lease(self, response_id: str) -> bool:
        """Its lease key holds something other than a lease (a string): set by hand, by another application or by
        a bug. No worker can take it (``SET NX`` finds the key) and it never expires: the response stayed
        in_progress for good, its waiting client with it. No run can write it either (the writer's guard is
        refused), nor so save its end, but for one saving it now, which the save's compare-and-set settles: it
        fails, the key left as it is."""
        record = self.db.run(get_response, response_id)
        if record is None or record.status != "in_progress":
            return False
        log.warning("the lease key %s holds something other than a lease (overwritten by hand, another application "
                    "or a bug): failing %s", redis_keys.lease(response_id), response_id)
        response = failed_response(record, LEASE_OVERWRITTEN_MESSAGE)
        if not end_failed(self.db, self.redis, self.webhooks, record, response, self._stream_ttl(record)):
            return False
        REAPER_ACTIONS.labels("failed").inc()
        return True

    def _stream_ttl(self, record: ResponseRecord) -> int:
        return self.ttl_seconds if record.store else self.unstored_ttl_seconds

    def _fail(self, response_id: str) -> bool:
        record = self.db.run(get_response, response_id)
        if record is None or record.status != "in_progress":
            return False
        response = failed_response(record)
        if not end_failed(self.db, self.redis, self.webhooks, record, response, self._stream_ttl(record)):
            return False
        log.warning("reaped %s: %s", response_id, WORKER_LOST_MESSAGE)
        REAPER_ACTIONS.labels("failed").inc()
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            started = time.monotonic()
            try:
                reaped = self.reap_once()
            except Exception as exc:
                if unreachable(exc):  # an outage: its start and end told, not a line a pass while it lasts
                    self.outages.failed(exc)
                else:
                    log.exception("reaper pass failed")
                continue
            self.outages.pass_answered(read_database=self._passed)
            if reaped:
                # Each response it handled has had its own WARNING; the pass's count and time are for INFO.
                log.info("reaper pass handled %d response%s in %.3fs", len(reaped), "" if len(reaped) == 1 else "s",
                         time.monotonic() - started)
