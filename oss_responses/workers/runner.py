"""The job of one response, run in a Celery task thread; the generation itself runs on the engine loop.

    load row + chain (SQL) ─ terminal or gone? skip; in_progress? a takeover (below)
    register for cancel; take the lease, read the handoff mark, the cancel flag, the stream's tail and
    the API process relaying it in one round trip, from this thread (workers/claim.py) ─ lease held by
    another worker? skip; flag set, or its relay gone (relays.py)? cancelled, stream closed, nothing
    generated
    prompt rendered here if the request lists no MCP tools (kept for the loop, an error included)
    ─ the worker began to stop meanwhile? handed back to the queue, still queued (not counted)
    ─ the engine loop gone when this thread next needs it (the thread was held past the stop's wait)?
    handed back, or, in progress, handed off (not counted)
    queued → in_progress (SQL)
    stored request/Response loaded (a row that cannot be: failed here, at once), tools resolved,
    in_progress event, tool lists streamed, prompt rendered (unless it was), an answered approval run
    or declined, generation (engine loop) ─ any exception fails the response, but a dead engine's: the
    response is passed on to another worker, and this worker stops (``WorkerContext.lose_engine``); and
    a prompt whose tokenizer child the worker's stop killed (``TokenizerClosed``): handed off
    drain the events (the terminal one included; one missing: left to a takeover) → save the turn (SQL)
    → close the stream (failed: the reaper ends it, workers/unclosed.py)
    release the lease

A response found ``in_progress`` lost its worker, or was handed off: ``takeover.py`` decides what its
takeover does (its end, or its journal's steps to replay), and it runs here as a fresh start does. On
shutdown (SIGTERM) running responses stop, flush, release their lease and are dispatched again at once:
a handoff.

SQL runs here in the task thread; the engine, and Redis but for the claim, the handoff and a
takeover's counters, only on the engine loop (``on_loop.py``: the translator, the tool listings, the
prompt, the generation started or resumed).
This module starts a run or takes one over, and sees it to its outcome; ``run_state.py`` holds what a run
holds (``Run``) and its ``Outcome``, ``handoff.py`` a run handed on (at shutdown, under a dead engine, after
a lost Redis write) and the lease let go, ``run_end.py`` a run's end (saved, archived, its stream closed) and
the queued responses whose task Celery revoked.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from redis.exceptions import ResponseError

from oss_responses import redis_keys
from oss_responses.engine.base import EngineDead, PromptTooLongError, SchemaNotConstrainable
from oss_responses.eventlog.bulk import lease_lost
from oss_responses.eventlog.rewinds import mark_rewound
from oss_responses.eventlog.writes import EventWriteError, framed
from oss_responses.harmony.lifecycle import opening_events
from oss_responses.prompt_tokenizer import TokenizerClosed
from oss_responses.redis_refusals import wrong_type
from oss_responses.relays import relay_gone
from oss_responses.requests import CreateResponseRequest
from oss_responses.statuses import TERMINAL_STATUSES
from oss_responses.storage import get_response, transition
from oss_responses.workers.claim import Claim, claim, reopen
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.engine_loop import LoopStopped
from oss_responses.workers.generation import StopCause
from oss_responses.workers.handoff import (
    hand_back,
    hand_off,
    hand_on_after_stop,
    leave_for_takeover,
    let_go,
    pass_on,
    send_again,
)
from oss_responses.workers.job import Job, JobLoadError, load_job
from oss_responses.workers.journal import Step
from oss_responses.workers.lease import Lease, run_owner
from oss_responses.workers.on_loop import fail, generate, resume
from oss_responses.workers.outage import unreachable, warn_failed
from oss_responses.workers.prompting import render_early
from oss_responses.workers.reaper import HANDOFF, end_failed, failed_response
from oss_responses.workers.run_end import end_queued, finish
from oss_responses.workers.run_state import Outcome, Run
from oss_responses.workers.stream_tail import next_sequence_number
from oss_responses.workers.takeover import fail_without_replay, take_over
from oss_responses.workers.unclosed import list_open_stream
from oss_responses.workers.unrun import fail_unrun

log = logging.getLogger(__name__)

OVERWRITTEN_MESSAGE = (
    "event_log_lost: this response's event log in Redis was overwritten (its key holds something other than a "
    "stream: set by hand, by another application or by a bug); it cannot be continued"
)

# The database says the response runs, its event log says it ended: the database came back from an earlier
# point than Redis. Its output was saved with its end (and its archived log with it), so it is gone.
DATABASE_BEHIND_MESSAGE = (
    "database_behind: the event log of this response says it ended {ended}, but the database still had it "
    "{status}: the database was restored to a point before this response ended (a backup, or a failover to a "
    "lagging replica), and its output is no longer stored; it cannot be recovered, create it again"
)


def run_response(ctx: WorkerContext, response_id: str, secrets: dict[str, dict[str, Any]] | None = None) -> Outcome:
    """Run one response to its end, or take it over from a lost worker (the body of the Celery task).
    Raising, for anything but an outage (which the task tries again), it first fails the response if
    it never started (``workers/unrun.py``)."""
    try:
        return _run_response(ctx, response_id, secrets)
    except Exception as exc:
        if not unreachable(exc):
            _fail_unrun(ctx, response_id, exc)
        raise


def _fail_unrun(ctx: WorkerContext, response_id: str, exc: Exception) -> None:
    try:
        fail_unrun(ctx, response_id, exc)
    except Exception:  # the store that broke the run may break this too: the original error is raised
        log.warning("could not fail %s after its run raised", response_id, exc_info=True)


def _run_response(ctx: WorkerContext, response_id: str, secrets: dict[str, dict[str, Any]] | None) -> Outcome:
    job = load_job(ctx.db, response_id, ctx.settings, secrets, ctx.sealer)
    if job is None:
        return "missing"
    if job.record.status not in ("queued", "in_progress"):
        _list_unclosed(ctx, response_id)
        return "skipped"
    if response_id in ctx.running:
        # Its run here lost its lease (this worker stalled past it) and has not noticed yet: it stops at
        # its next renewal, and the takeover is dispatched again. Two runs of one response in one worker
        # would share its event writer's buffer.
        return "running_here"
    lease = Lease(ctx.redis, response_id, run_owner(ctx.worker_id), ctx.settings.lease_seconds)
    run = Run(ctx, job, lease)
    taken = _claim(run)
    if taken is None:
        return "leased_elsewhere"
    try:
        return _run_leased(run, taken)
    except LoopStopped:  # this thread went on after its worker's stop (held past its wait): a stop, not a loss
        return hand_on_after_stop(run)
    finally:
        let_go(run)


def _list_unclosed(ctx: WorkerContext, response_id: str) -> None:
    """A task of an ended response whose stream has no end marker: listed open, so that the reaper ends it
    from SQL (``workers/unclosed.py``). A Redis restored from a snapshot taken while the response was queued
    gives its task back, and its stream back as its accept wrote it, outside the open streams: every replay
    of the ended response then stopped at ``response.queued`` and waited for the event TTL (a day)."""
    key = redis_keys.events(response_id)
    try:
        tail = ctx.sync_redis.xrevrange(key, count=1)
    except ResponseError as exc:  # a known condition, no traceback: nothing to end, no reader to end it for
        if not wrong_type(exc):
            raise
        log.warning("%s ended in SQL; its event log key %s holds something other than a stream (overwritten by "
                    "hand, another application or a bug): its task is skipped", response_id, key)
        return
    if tail and b"end" not in (tail[0][1] or {}):
        log.warning("%s ended in SQL but its event stream did not (Redis restored from an earlier state?): "
                    "the reaper ends it", response_id)
        list_open_stream(ctx.sync_redis, response_id)


def _run_leased(run: Run, taken: Claim) -> Outcome:
    ctx, job = run.ctx, run.job
    try:
        ctx.loop.call_soon(partial(_hold, run))  # before anything this thread sends the loop next
        if taken.overwritten:
            return _fail_overwritten(run)
        if taken.next_sequence_number is None:
            return _fail_behind_event_log(run, taken.ended or "unknown")
        if job.record.status == "in_progress":
            # The takeover is under way: a later loss may be dispatched again. A handoff is no loss.
            _mark_rewound(run, taken.next_sequence_number)
            decided = take_over(run, counted=taken.resume_mark != HANDOFF.encode())
            return decided if isinstance(decided, str) else _execute(run, decided.steps)
        if taken.cancel_requested:
            return _cancel_queued(ctx, job)
        if taken.missing_relay is not None and relay_gone(ctx.sync_redis, taken.missing_relay):
            log.warning("%s was queued for a client of an API process that is gone (killed, or its host lost): "
                        "cancelled instead of run", job.response_id)
            return _cancel_queued(ctx, job)
        run.first_sequence_number = taken.next_sequence_number or 0
        if taken.next_sequence_number == 0 and job.load_error is None:
            run.first_sequence_number = _reopen_stream(run)
        run.early_prompt = render_early(ctx, job)
        if ctx.shutting_down:  # told while the prompt rendered (a run registered after was told at once)
            return hand_back(run)
        if not ctx.db.run(transition, job.response_id, from_statuses=("queued",), to_status="in_progress"):
            return "skipped"  # cancelled by the API meanwhile
        return _execute(run)
    finally:
        # Dict pops and an attribute: safe from this thread. Each callback holds the run, and the run holds the
        # lease that holds one: left in place, that cycle kept the run's whole graph (its job, generation,
        # translator: about 120 objects) for the cyclic garbage collector, whose passes stop the engine loop.
        _unregister(run)


def _mark_rewound(run: Run, next_number: int) -> None:
    """A takeover whose stream ends before the lost run had numbered it (Redis restored from an earlier state):
    the numbers from there to the lost run's last are written anew, maybe otherwise; marked before anything is
    written, so that a reader who saw an old one is told (``eventlog/rewinds.py``). Per takeover, not per event."""
    high_water = run.job.record.stream_high_water
    if high_water is None or next_number > high_water:
        return
    # Both happen: a run whose writes Redis never took (it stopped answering, its flushes given up) leaves
    # its numbers unwritten, and a Redis restored from a snapshot or a lagging replica lost written ones.
    # INFO: in every outage a run's last appends miss Redis, and the reaper told the loss; a reader is told by the mark
    log.info("the event stream of %s ends before event %d, which its lost run had numbered (its last writes "
             "did not reach Redis, or Redis was restored from an earlier state): events %d..%d are written anew",
             run.job.response_id, high_water, next_number, high_water)
    mark_rewound(run.ctx.sync_redis, run.job.response_id, (next_number, high_water), run.ctx.settings.event_ttl_seconds)


def _fail_behind_event_log(run: Run, ended: str) -> Outcome:
    """Its stream ended though the database has it queued or running: SQL saves an end before the stream
    gets its end marker, so only a database older than Redis shows this. Run again, it wrote events behind
    the end marker (refused) and was taken over until it failed with a JournalError and a traceback; the
    stream (a tombstone once archived: its frames were in the rolled-back database too) cannot give the
    output back. It fails, saying so. The row is read again first: the run that held the lease may have
    saved its end and closed the stream after this task loaded the row (a task delivered twice), which is
    no rollback."""
    ctx = run.ctx
    record = ctx.db.run(get_response, run.job.response_id)
    if record is None or record.status not in ("queued", "in_progress"):
        return "skipped"
    message = DATABASE_BEHIND_MESSAGE.format(ended=ended, status=record.status)
    log.warning("%s is %s in the database but its event stream ended %s: the database is older than Redis "
                "(restored from a backup, or failed over to a lagging replica?); failing it, its output is lost. "
                "Every response that ended after the database's restore point is in the same state",
                record.id, record.status, ended)
    if end_failed(ctx.db, ctx.sync_redis, ctx.webhooks, record, failed_response(record, message),
                  ctx.settings.stream_ttl_seconds(record.store)):
        return "failed"
    return "skipped"


def _fail_overwritten(run: Run) -> Outcome:
    """Its stream's key holds something other than a stream: its events, and any later write, are gone, as in a
    Redis that lost its data, and it fails saying so (queued or running: a run whose write was refused so left
    it to this takeover). The key is left as it is (``reaper.close_with_failure``): its readers are told
    ``event_log_lost`` and to retrieve the response."""
    key = redis_keys.events(run.job.response_id)
    log.warning("the event log key %s holds something other than a stream (overwritten by hand, another "
                "application or a bug): failing %s", key, run.job.response_id)
    return fail_without_replay(run, OVERWRITTEN_MESSAGE)


def _reopen_stream(run: Run) -> int:
    """A queued response whose stream is gone (its opening events expired while it waited): the opening
    written again, as the API wrote it, from the stored Response; the next sequence number."""
    response_id = run.job.response_id
    opening = framed(opening_events(run.job.response))
    if reopen(run.ctx.sync_redis, run.lease, response_id, opening):
        log.warning("the event stream of %s was gone (its opening events expired in the queue): written again",
                    response_id)
        return len(opening)
    return run.ctx.loop.run(next_sequence_number(run.ctx.redis, response_id)) or 0


def _claim(run: Run) -> Claim | None:
    """Registered for cancel first (so a cancel published while the flag is read is not missed), then
    the lease and what the start needs, in one round trip; unregistered again without the lease.

    Asked from this thread, not the loop (see workers/claim.py). The lease's keeper starts on the
    loop once the run is under way (``_run_leased``), where a loop gone by then is a stop: started here,
    its refusal left the lease taken, to lapse, and the next worker counted a takeover."""
    _register(run)
    try:
        taken = claim(run.ctx.sync_redis, run.lease, run.job.response_id)
    except BaseException:
        _unregister(run)
        raise
    if taken is None:
        _unregister(run)
    return taken


def _hold(run: Run) -> None:
    """On the loop, once the lease is ours: the response's writes land only while the lease is this
    run's (an old failed write of it on this worker is history), and the lease is renewed until released."""
    run.ctx.writer.fence(run.job.response_id, run.fence)
    run.lease.keep_alive()


def _register(run: Run) -> None:
    """Cancel, a lost lease and shutdown stop the run (their callbacks are called on the loop)."""
    run.ctx.cancels.register(run.job.response_id, lambda: _stop(run, "cancelled"))
    run.ctx.running[run.job.response_id] = lambda: _stop(run, "handoff")
    run.lease.on_lost = lambda: _stop(run, "lease_lost")
    if run.ctx.shutting_down:  # the worker began to shut down after hand_off_all looked: handed off too
        _stop(run, "handoff")


def _unregister(run: Run) -> None:
    run.ctx.cancels.unregister(run.job.response_id)
    run.ctx.running.pop(run.job.response_id, None)
    run.lease.on_lost = None


def _stop(run: Run, cause: StopCause) -> None:
    if run.generation is not None:
        run.generation.stop(cause)
    elif run.stop_cause is None:
        run.stop_cause = cause


def _cancel_queued(ctx: WorkerContext, job: Job) -> Outcome:
    end_queued(ctx, job.record)
    return "cancelled"


def _execute(run: Run, steps: list[Step] | None = None) -> Outcome:
    """Run the response from its start, or (``steps``: its journal) from where a lost worker stopped."""
    ctx, job = run.ctx, run.job
    engine_lost = False
    try:
        if steps is not None:
            ctx.loop.run(resume(run, job.request(), steps))
        else:
            ctx.loop.run(generate(run, job.request()))
    except EventWriteError as exc:
        if wrong_type(exc.__cause__ or exc):  # a known condition, its key named by the takeover: no traceback
            log.warning("a write to the event log of %s was refused (%s): leaving it to a takeover", job.response_id,
                        exc.__cause__)
        elif lease_lost(exc.__cause__ or exc):  # paused past its lease, or its key deleted: expected, no traceback
            log.warning("%s lost its lease (another worker took it over, or its key was deleted): its writes are "
                        "refused, this run stops", job.response_id)
        else:
            # An outage's own lines tell it, and the reaper's dispatch of the takeover tells the response (WARNING)
            warn_failed(log, exc, "the event log of %s is unreachable: leaving it to a takeover", job.response_id,
                        outage_level=logging.INFO)
        return leave_for_takeover(run)
    except LoopStopped:  # the worker stopped under it, past its wait for the task threads: a stop, not a loss
        log.warning("the engine loop of this stopping worker stopped under %s: handed off", job.response_id)
        return "handed_off" if send_again(run, HANDOFF, ctx.settings.event_ttl_seconds) else "lease_lost"
    except TokenizerClosed:  # the stop killed the child its prompt was in (WorkerContext.stop): not the request's doing
        log.info("the prompt of %s was not rendered: this worker is stopping", job.response_id)
        return hand_off(run)
    except EngineDead as exc:  # this worker's doing, not the request's: the response goes on elsewhere
        ctx.lose_engine(exc)
        engine_lost = True
    except PromptTooLongError as exc:  # the request's doing, not the worker's: no traceback; OpenAI's code
        log.warning("response %s failed: %s", job.response_id, exc)
        fail(run, f"{exc} {_too_long_advice(job.request())}", code="context_length_exceeded")
    except SchemaNotConstrainable as exc:
        log.warning("response %s failed: %s", job.response_id, exc)
        fail(run, str(exc), code="invalid_prompt")
    except Exception as exc:
        if isinstance(exc, JobLoadError) and exc.code == "invalid_prompt":  # the client deleted what it continues
            log.warning("response %s failed: %s", job.response_id, exc)
        else:
            log.exception("response %s failed", job.response_id)
        if isinstance(exc, JobLoadError):
            fail(run, str(exc), code=exc.code)
        else:
            fail(run, f"The response failed in the worker: {type(exc).__name__}: {exc}")
    stop_cause = run.generation.stop_cause if run.generation is not None else run.stop_cause
    if stop_cause == "lease_lost":
        return "lease_lost"
    if engine_lost and not _is_terminal(run):
        return pass_on(run)
    if stop_cause == "handoff" and not _is_terminal(run):
        return hand_off(run)
    return finish(run)


def _too_long_advice(request: CreateResponseRequest) -> str:
    if request.truncation == "auto":
        return ("Truncation keeps at least the last user message and the latest tool call with its result: "
                "these alone do not fit. Shorten them.")
    return 'Shorten the input or the conversation, or send truncation: "auto".'


def _is_terminal(run: Run) -> bool:
    return run.translator is not None and run.translator.response.status in TERMINAL_STATUSES
