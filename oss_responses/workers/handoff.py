"""A run handed on rather than ended here, and its lease let go at the end of every run.

- ``hand_off``: the worker shuts down under a running response: everything written, the lease released,
  the response sent to another worker (marked a handoff: no loss, not counted).
- ``hand_back`` / ``send_back``: the worker began to stop before the response started (or its task
  arrived while it stops): the response goes back to its queue, still queued.
- ``hand_on_after_stop``: a task thread went on after the engine loop stopped: its response handed back,
  or (in progress) handed off, not counted.
- ``pass_on``: the engine died under the response: it goes to another worker as a lost worker's does
  (counted against ``max_takeovers``).
- ``leave_for_takeover``: Redis lost a write of the response: the run stops and its lease lapses; the
  reaper dispatches a takeover once Redis answers.
- ``let_go``: the run's fence dropped from the writer and its lease released.
"""

from __future__ import annotations

import contextlib
import logging
from functools import partial
from typing import Any

from redis.exceptions import RedisError

from oss_responses import redis_keys
from oss_responses.eventlog.writes import EventWriteError
from oss_responses.statuses import TERMINAL_STATUSES
from oss_responses.storage import get_response, transition
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.engine_loop import LoopStopped
from oss_responses.workers.generation import Generation
from oss_responses.workers.job import load_job
from oss_responses.workers.lease import Lease
from oss_responses.workers.outage import outage, warn_failed
from oss_responses.workers.reaper import HANDOFF, resume_wait_seconds
from oss_responses.workers.run_state import Outcome, Run

log = logging.getLogger(__name__)


def let_go(run: Run) -> None:
    """The run's fence dropped from the writer and its lease released. A task thread freed after its worker
    stopped (from a stopped tokenizer child) finds the loop gone, and the writer and the lease's keeper with
    it: the lease is released from here (the loop's refusal had replaced the run's outcome by a traceback)."""
    ctx = run.ctx
    with contextlib.suppress(LoopStopped):
        ctx.loop.call_soon(partial(ctx.writer.unfence, run.job.response_id, run.fence))
    try:
        _release(run)
    except RedisError as exc:
        # An outage is INFO: the worker's Redis outage lines tell it (and a run whose write it cut, its own
        # WARNING); its takeover, once Redis answers, is told again.
        if outage(exc):
            ctx.unreleased.add(run.lease)
        warn_failed(log, exc, "releasing the lease of %s failed: released once Redis answers, else it lapses within "
                    "%.0f s", run.job.response_id, ctx.settings.lease_seconds, outage_level=logging.INFO)


def _release(run: Run) -> None:
    """On the loop, where its keeper stops first; from this thread once the loop is gone."""
    try:
        run.ctx.loop.run(run.lease.release())
    except LoopStopped:
        run.lease.release_from_thread(run.ctx.sync_redis)


def send_back(ctx: WorkerContext, response_id: str, secrets: dict[str, dict[str, Any]] | None) -> Outcome:
    """A task that arrived while this worker shuts down: its response goes back to the queue, untouched."""
    job = load_job(ctx.db, response_id, ctx.settings, secrets, ctx.sealer)
    if job is None:
        return "missing"
    assert ctx.dispatch is not None
    ctx.dispatch(response_id, job.record.model, secrets)
    return "handed_off"


def hand_back(run: Run) -> Outcome:
    """The worker began to stop before this run started: its prompt was rendering, which can outlast the
    stop's wait for its tasks, and the engine loop (a tokenizer child stopped, then killed by the stop). The
    response goes back to its queue as it came, still queued, as a task arriving now is sent back
    (``send_back``). Moved to in_progress, it failed on the stopped loop and the next worker took it over
    as a lost one: counted against ``max_takeovers``, so that deploys could fail it ``worker_lost``."""
    ctx, job = run.ctx, run.job
    _release(run)
    if ctx.dispatch is not None:  # else the stale sweep sends its task again
        ctx.dispatch(job.response_id, job.record.model, None)  # its credentials are sealed in its row
    log.info("handed %s back to its queue before it started: this worker is stopping", job.response_id)
    return "handed_off"


def hand_on_after_stop(run: Run) -> Outcome:
    """The task thread went on after its worker's engine loop had stopped (held past the stop's wait for its
    task threads: a stopped tokenizer child, a stalled store). A response still queued goes back as it came
    (``hand_back``); one in progress (taken over, or started here) is sent on marked a handoff, as a stop's
    are. Its lease was released without the mark (its claim had consumed the one it came with), or left to
    lapse, and the next worker counted a takeover: a deploy could push the response to ``max_takeovers``."""
    ctx, job = run.ctx, run.job
    record = ctx.db.run(get_response, job.response_id)  # as it is now: this run may have started it
    if record is None or record.status in TERMINAL_STATUSES:  # saved: a stream left open is the reaper's
        return "skipped"
    if record.status == "queued":
        return hand_back(run)
    log.warning("the engine loop of this stopping worker was gone before it was done with %s: handed off",
                job.response_id)
    return "handed_off" if send_again(run, HANDOFF, ctx.settings.event_ttl_seconds) else "lease_lost"


def leave_for_takeover(run: Run) -> Outcome:
    """Redis lost a write of this response: stop generating and let the lease lapse (nothing written,
    nothing saved). Once Redis answers, the reaper dispatches a takeover, which replays the journal
    (whatever of it reached Redis) and writes the events the stream lacks."""
    ctx = run.ctx
    if run.generation is not None:
        ctx.loop.run(_abort(run.generation))
    run.lease.on_lost = None
    ctx.loop.run(_stop_renewing(run.lease))
    _note_high_water(run)
    return "lease_lost"


def _note_high_water(run: Run) -> None:
    """How far this run numbered its stream, in SQL: a Redis that comes back from an earlier state gives the
    stream back shorter, and the takeover that finds it so marks the span it writes anew (``eventlog/rewinds.py``).
    Redis cannot keep this: it is what may be lost. Best effort: the database may be away too."""
    if run.translator is None:
        return
    last = run.translator.next_sequence_number - 1
    try:
        run.ctx.db.run(transition, run.job.response_id, from_statuses=("in_progress",), to_status="in_progress",
                       stream_high_water=last)
    except Exception as exc:
        warn_failed(log, exc, "could not record how far %s numbered its stream (%d)", run.job.response_id, last)


async def _abort(generation: Generation) -> None:
    generation.stop("lease_lost")


async def _stop_renewing(lease: Lease) -> None:
    lease.stop_renewing()


def hand_off(run: Run) -> Outcome:
    """Shutting down: everything written, the lease released, the response queued for another worker."""
    ctx, job = run.ctx, run.job
    try:
        ctx.loop.run(ctx.writer.drain(job.response_id))
    except EventWriteError as exc:
        if outage(exc):
            warn_failed(log, exc, "events of %s did not all reach Redis before its handoff: its next run writes "
                        "what the stream lacks from its journal", job.response_id)
        else:
            log.exception("events of %s did not all reach Redis before its handoff", job.response_id)
    if ctx.dispatch is None:  # the reaper dispatches it once it sees the lease free
        ctx.loop.run(run.lease.release())
        return "handed_off"
    if not send_again(run, HANDOFF, ctx.settings.event_ttl_seconds):
        return "lease_lost"
    log.info("handed %s off to another worker", job.response_id)
    return "handed_off"


def send_again(run: Run, mark: str, mark_seconds: int) -> bool:
    """The response's task sent again for another worker: marked (``resume(id)``), so that the reaper does not
    dispatch it too, and its lease released, so that the worker that gets it can take the lease; both in one
    step, unless another run holds the lease. A run that lost its lease without knowing yet (its link to Redis
    silent, its keeper's renewals timing out, another worker's takeover under way) marked a response that worker
    held: the mark kept that worker's own loss from being counted and held its takeover back for a minute.
    False, and nothing sent: another run holds the response."""
    ctx, job = run.ctx, run.job
    key = redis_keys.resume(job.response_id)
    try:
        handed = ctx.loop.run(run.lease.hand_on(key, mark, mark_seconds))
    except LoopStopped:
        handed = run.lease.hand_on_from_thread(ctx.sync_redis, key, mark, mark_seconds)
    if not handed:
        log.warning("%s is held by another run (this one lost its lease): left to it", job.response_id)
        return False
    if ctx.dispatch is not None:  # else the reaper dispatches it once the mark lapses
        ctx.dispatch(job.response_id, job.record.model, None)  # its credentials are sealed in its row
    return True


def pass_on(run: Run) -> Outcome:
    """The engine died under the response: what it streamed written, the lease released, and the response
    sent to another worker as a lost worker's is (no handoff mark: the takeover is counted, so that a
    request that kills every engine it meets fails after ``max_takeovers``). The mark holds the reaper
    off while the task waits, as its own dispatches do."""
    ctx, job = run.ctx, run.job
    try:
        ctx.loop.run(ctx.writer.drain(job.response_id))
    except EventWriteError as exc:
        warn_failed(log, exc, "events of %s did not all reach Redis before it was passed on", job.response_id)
        return leave_for_takeover(run)
    if not send_again(run, "engine_lost", resume_wait_seconds(ctx.settings.lease_seconds)):
        return "lease_lost"
    log.warning("passed %s on to another worker: this worker's engine stopped", job.response_id)
    return "engine_lost"
