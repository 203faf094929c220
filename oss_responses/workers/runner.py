"""The job of one response, run in a Celery task thread; the generation itself runs on the engine loop.

    load row + chain (SQL) ─ terminal or gone? skip; in_progress? a takeover (below)
    register for cancel; take the lease, read the handoff mark, the cancel flag and the stream's tail
    in one round trip, from this thread (workers/claim.py) ─ lease held by another worker? skip; flag
    set? cancelled, stream closed, nothing generated
    prompt rendered here if the request lists no MCP tools (kept for the loop, an error included)
    ─ the worker began to stop meanwhile? handed back to the queue, still queued (not counted)
    queued → in_progress (SQL)
    stored request/Response loaded (a row that cannot be: failed here, at once), tools resolved,
    in_progress event, tool lists streamed, prompt rendered (unless it was), an answered approval run
    or declined, generation (engine loop) ─ any exception fails the response, but a dead engine's: the
    response is passed on to another worker, and this worker stops (``WorkerContext.lose_engine``)
    drain the events (the terminal one included; one missing: left to a takeover) → save the turn (SQL)
    → close the stream (failed: the reaper ends it, workers/unclosed.py)
    release the lease

Every translator call and engine call is journaled (``workers/journal.py``). A response found
``in_progress`` lost its worker (the reaper dispatched it again, or Celery redelivered its task): once
this worker holds its lease, the journal is replayed through a fresh translator, the replayed events
the stream lacks are written, and generation resumes; the client's stream goes on with the next
sequence number. On shutdown (SIGTERM) running responses stop, flush, release their lease and are
dispatched again at once: a handoff.

SQL runs here in the task thread; the engine, and Redis but for the claim, the handoff and a
takeover's counters, only on the engine loop.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from redis.exceptions import RedisError
from sqlalchemy.exc import DBAPIError

from oss_responses import redis_keys
from oss_responses.cancel_request import flag_commands
from oss_responses.engine.base import EngineDead, PromptTooLongError, SchemaNotConstrainable
from oss_responses.eventlog.entries import as_entries
from oss_responses.eventlog.writer import EventWriteError, Fence, framed
from oss_responses.harmony.history import listed_tools
from oss_responses.harmony.hosted_items import DEFAULT_HOSTED_CALLS
from oss_responses.harmony.lifecycle import opening_events
from oss_responses.harmony.render import RenderedPrompt, hosted_builtins, hosted_calls, offered_functions
from oss_responses.harmony.translator import ApprovalPolicy
from oss_responses.metrics import TAKEOVERS
from oss_responses.requests import REASONING_ENCRYPTED_CONTENT, CreateResponseRequest
from oss_responses.statuses import TERMINAL_STATUSES
from oss_responses.storage import ResponseRecord, cancel_queued, get_response, save_turn, transition
from oss_responses.storage.webhook_deliveries import DeliveryRow, ended_with_deliveries
from oss_responses.webhooks.notify import log_rows
from oss_responses.wire import response_json, wire_json
from oss_responses.workers.archive import archive_event_log, drop_event_log
from oss_responses.workers.cancel import is_cancel_requested
from oss_responses.workers.claim import Claim, claim, reopen
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.ended import planned_webhooks, response_ended
from oss_responses.workers.engine_loop import LoopStopped
from oss_responses.workers.generation import Generation, StopCause
from oss_responses.workers.job import Job, JobLoadError, load_job
from oss_responses.workers.journal import (
    JournaledTranslator,
    JournalError,
    Step,
    apply_translator_step,
    first_sequence_number,
    listed_in,
    read_journal,
    split_at_prompt,
    unfinished_listings,
)
from oss_responses.workers.lease import Lease, run_owner
from oss_responses.workers.outage import Backoff, unreachable
from oss_responses.workers.prompting import forced_tokens, prompt_budget, render, render_early, sampling
from oss_responses.workers.reaper import HANDOFF, end_failed, failed_response, resume_wait_seconds
from oss_responses.workers.stream_tail import next_sequence_number
from oss_responses.workers.tooling import (
    PreparedTools,
    approval_policy,
    idempotent_calls,
    list_new_tools,
    prepare_tools,
)
from oss_responses.workers.unrun import fail_unrun

log = logging.getLogger(__name__)

PROGRESS_LOST_MESSAGE = (
    "event_log_lost: Redis lost this response's events and progress (was it restarted without "
    "persistence?); it cannot be continued"
)

# The database says the response runs, its event log says it ended: the database came back from an earlier
# point than Redis. Its output was saved with its end (and its archived log with it), so it is gone.
DATABASE_BEHIND_MESSAGE = (
    "database_behind: the event log of this response says it ended {ended}, but the database still had it "
    "{status}: the database was restored to a point before this response ended (a backup, or a failover to a "
    "lagging replica), and its output is no longer stored; it cannot be recovered, create it again"
)

Outcome = Literal[
    "completed", "incomplete", "failed", "cancelled", "missing", "skipped", "leased_elsewhere", "running_here",
    "lease_lost", "handed_off", "engine_lost",
]


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
    run = _Run(ctx, job, lease)
    taken = _claim(run)
    if taken is None:
        return "leased_elsewhere"
    try:
        return _run_leased(run, taken)
    finally:
        _let_go(run)


def _let_go(run: _Run) -> None:
    """The run's fence dropped from the writer and its lease released. A task thread freed after its worker
    stopped (from a stopped tokenizer child) finds the loop gone, and the writer and the lease's keeper with
    it: the lease is released from here (the loop's refusal had replaced the run's outcome by a traceback)."""
    ctx = run.ctx
    with contextlib.suppress(LoopStopped):
        ctx.loop.call_soon(partial(ctx.writer.unfence, run.job.response_id, run.fence))
    try:
        _release(run)
    except RedisError:  # Redis went away: the lease lapses by itself
        log.warning("releasing the lease of %s failed", run.job.response_id, exc_info=True)


def _release(run: _Run) -> None:
    """On the loop, where its keeper stops first; from this thread once the loop is gone."""
    try:
        run.ctx.loop.run(run.lease.release())
    except LoopStopped:
        run.lease.release_from_thread(run.ctx.sync_redis)


def _list_unclosed(ctx: WorkerContext, response_id: str) -> None:
    """A task of an ended response whose stream has no end marker: listed open, so that the reaper ends it
    from SQL (``workers/unclosed.py``). A Redis restored from a snapshot taken while the response was queued
    gives its task back, and its stream back as its accept wrote it, outside the open streams: every replay
    of the ended response then stopped at ``response.queued`` and waited for the event TTL (a day)."""
    tail = ctx.sync_redis.xrevrange(redis_keys.events(response_id), count=1)
    if tail and b"end" not in (tail[0][1] or {}):
        log.warning("%s ended in SQL but its event stream did not (Redis restored from an earlier state?): "
                    "the reaper ends it", response_id)
        ctx.sync_redis.sadd(redis_keys.OPEN_STREAMS, response_id)


def send_back(ctx: WorkerContext, response_id: str, secrets: dict[str, dict[str, Any]] | None) -> Outcome:
    """A task that arrived while this worker shuts down: its response goes back to the queue, untouched."""
    job = load_job(ctx.db, response_id, ctx.settings, secrets, ctx.sealer)
    if job is None:
        return "missing"
    assert ctx.dispatch is not None
    ctx.dispatch(response_id, job.record.model, secrets)
    return "handed_off"


@dataclass
class _Run:
    ctx: WorkerContext
    job: Job
    lease: Lease
    first_sequence_number: int = 0
    translator: JournaledTranslator | None = None
    generation: Generation | None = None
    rendered: RenderedPrompt | None = None
    stop_cause: StopCause | None = None  # asked before the generation existed
    early_prompt: RenderedPrompt | Exception | None = None  # rendered in the task thread (see prompting.render_early)
    fail_after_replay: str | None = None  # taken over too often: replayed, then failed

    @property
    def fence(self) -> Fence:
        return Fence(self.lease.key, self.lease.owner)


def _run_leased(run: _Run, taken: Claim) -> Outcome:
    ctx, job = run.ctx, run.job
    try:
        if taken.next_sequence_number is None:
            return _fail_behind_event_log(run)
        if job.record.status == "in_progress":
            # The takeover is under way: a later loss may be dispatched again. A handoff is no loss.
            return _take_over(run, counted=taken.resume_mark != HANDOFF.encode())
        if taken.cancel_requested:
            return _cancel_queued(ctx, job)
        run.first_sequence_number = taken.next_sequence_number or 0
        if taken.next_sequence_number == 0 and job.load_error is None:
            run.first_sequence_number = _reopen_stream(run)
        run.early_prompt = render_early(ctx, job)
        if ctx.shutting_down:  # told while the prompt rendered (a run registered after was told at once)
            return _hand_back(run)
        if not ctx.db.run(transition, job.response_id, from_statuses=("queued",), to_status="in_progress"):
            return "skipped"  # cancelled by the API meanwhile
        return _execute(run)
    finally:
        ctx.cancels.unregister(job.response_id)  # a dict pop: safe from this thread
        ctx.running.pop(job.response_id, None)


def _fail_behind_event_log(run: _Run) -> Outcome:
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
    tail = as_entries(ctx.sync_redis.xrevrange(redis_keys.events(record.id), count=1))
    ended = (tail[0][1].get(b"end", b"") if tail else b"").decode() or "unknown"
    message = DATABASE_BEHIND_MESSAGE.format(ended=ended, status=record.status)
    log.warning("%s is %s in the database but its event stream ended %s: the database is older than Redis "
                "(restored from a backup, or failed over to a lagging replica?); failing it, its output is lost. "
                "Every response that ended after the database's restore point is in the same state",
                record.id, record.status, ended)
    if end_failed(ctx.db, ctx.sync_redis, ctx.webhooks, record, failed_response(record, message),
                  ctx.settings.event_ttl_seconds):
        return "failed"
    return "skipped"


def _hand_back(run: _Run) -> Outcome:
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


def _reopen_stream(run: _Run) -> int:
    """A queued response whose stream is gone (its opening events expired while it waited): the opening
    written again, as the API wrote it, from the stored Response; the next sequence number."""
    response_id = run.job.response_id
    opening = framed(opening_events(run.job.response))
    if reopen(run.ctx.sync_redis, run.lease, response_id, opening):
        log.warning("the event stream of %s was gone (its opening events expired in the queue): written again",
                    response_id)
        return len(opening)
    return run.ctx.loop.run(next_sequence_number(run.ctx.redis, response_id)) or 0


def _claim(run: _Run) -> Claim | None:
    """Registered for cancel first (so a cancel published while the flag is read is not missed), then
    the lease and what the start needs, in one round trip; unregistered again without the lease.

    Asked from this thread, not the loop (see workers/claim.py). The lease's keeper starts on the
    loop, queued before anything this thread sends there next."""
    _register(run)
    try:
        taken = claim(run.ctx.sync_redis, run.lease, run.job.response_id)
        if taken is not None:
            run.ctx.loop.call_soon(partial(_hold, run))
    except BaseException:
        _unregister(run)
        raise
    if taken is None:
        _unregister(run)
    return taken


def _hold(run: _Run) -> None:
    """On the loop, once the lease is ours: the response's writes land only while the lease is this
    run's (an old failed write of it on this worker is history), and the lease is renewed until released."""
    run.ctx.writer.fence(run.job.response_id, run.fence)
    run.lease.keep_alive()


def _register(run: _Run) -> None:
    """Cancel, a lost lease and shutdown stop the run (their callbacks are called on the loop)."""
    run.ctx.cancels.register(run.job.response_id, lambda: _stop(run, "cancelled"))
    run.ctx.running[run.job.response_id] = lambda: _stop(run, "handoff")
    run.lease.on_lost = lambda: _stop(run, "lease_lost")
    if run.ctx.shutting_down:  # the worker began to shut down after hand_off_all looked: handed off too
        _stop(run, "handoff")


def _unregister(run: _Run) -> None:
    run.ctx.cancels.unregister(run.job.response_id)
    run.ctx.running.pop(run.job.response_id, None)
    run.lease.on_lost = None


def _stop(run: _Run, cause: StopCause) -> None:
    if run.generation is not None:
        run.generation.stop(cause)
    elif run.stop_cause is None:
        run.stop_cause = cause


def cancel_revoked(ctx: WorkerContext, response_id: str) -> Outcome:
    """A task of this response that Celery discarded unrun (``celery control revoke``): a queued response
    is cancelled, as if its client had asked, rather than left ``queued`` until the stale sweep sends its
    task again; one running or ended (a revoked duplicate) is left alone.

    Listed among the open streams first, as the API's cancel does: should the end marker not reach Redis,
    the reaper ends the stream (``workers/unclosed.py``)."""
    record = ctx.db.run(get_response, response_id)
    if record is None:
        return "missing"
    if record.status != "queued":
        return "skipped"
    ctx.sync_redis.sadd(redis_keys.OPEN_STREAMS, response_id)
    # Lost: it left the queue meanwhile (a duplicate of its task runs it), or it ended.
    return "cancelled" if _end_queued(ctx, record) else "skipped"


def cancel_terminated(ctx: WorkerContext, response_id: str) -> None:
    """A running task that Celery was told to terminate (``celery control revoke ID --terminate``): its
    response is cancelled as a client's cancel does, through every worker's listener, since the pool
    cannot kill the thread that runs it (``workers/pool.py``)."""
    with ctx.sync_redis.pipeline(transaction=False) as pipe:
        for command in flag_commands(response_id, ctx.settings.event_ttl_seconds):
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        pipe.execute()
    ctx.sync_redis.publish(redis_keys.CANCEL_CHANNEL, response_id)  # once flagged: cancel_request.py


def _cancel_queued(ctx: WorkerContext, job: Job) -> Outcome:
    _end_queued(ctx, job.record)
    return "cancelled"


def _end_queued(ctx: WorkerContext, record: ResponseRecord) -> bool:
    """A queued response cancelled, its stream closed and its end announced; False if it was not queued."""
    webhooks = planned_webhooks(ctx.webhooks, record.id, "cancelled", background=record.background)
    if not ctx.db.run(ended_with_deliveries, log_rows(webhooks), cancel_queued, record.id, record.response):
        return False
    ctx.loop.run(_close_stream(ctx, record, "cancelled"))
    response_ended(ctx.webhooks, record.model, "cancelled", webhooks)
    return True


def _execute(run: _Run, steps: list[Step] | None = None) -> Outcome:
    """Run the response from its start, or (``steps``: its journal) from where a lost worker stopped."""
    ctx, job = run.ctx, run.job
    engine_lost = False
    try:
        if steps is not None:
            ctx.loop.run(_resume(run, job.request(), steps))
        else:
            ctx.loop.run(_generate(run, job.request()))
    except EventWriteError:
        log.warning("the event log of %s is unreachable: leaving it to a takeover", job.response_id, exc_info=True)
        return _leave_for_takeover(run)
    except LoopStopped:  # the worker stopped under it, past its wait for the task threads: a stop, not a loss
        log.warning("the engine loop of this stopping worker stopped under %s: handed off", job.response_id)
        _send_again(run, HANDOFF, ctx.settings.event_ttl_seconds)
        return "handed_off"
    except EngineDead as exc:  # this worker's doing, not the request's: the response goes on elsewhere
        ctx.lose_engine(exc)
        engine_lost = True
    except PromptTooLongError as exc:  # the request's doing, not the worker's: no traceback, invalid_prompt
        log.warning("response %s failed: %s", job.response_id, exc)
        _fail(run, f"{exc} {_too_long_advice(job.request())}", code="invalid_prompt")
    except SchemaNotConstrainable as exc:
        log.warning("response %s failed: %s", job.response_id, exc)
        _fail(run, str(exc), code="invalid_prompt")
    except Exception as exc:
        log.exception("response %s failed", job.response_id)
        if isinstance(exc, JobLoadError):
            _fail(run, str(exc), code=exc.code)
        else:
            _fail(run, f"The response failed in the worker: {type(exc).__name__}: {exc}")
    stop_cause = run.generation.stop_cause if run.generation is not None else run.stop_cause
    if stop_cause == "lease_lost":
        return "lease_lost"
    if engine_lost and not _is_terminal(run):
        return _pass_on(run)
    if stop_cause == "handoff" and not _is_terminal(run):
        return _hand_off(run)
    return _finish(run)


def _too_long_advice(request: CreateResponseRequest) -> str:
    if request.truncation == "auto":
        return ("Truncation keeps at least the last user message and the latest tool call with its result: "
                "these alone do not fit. Shorten them.")
    return 'Shorten the input or the conversation, or send truncation: "auto".'


def _is_terminal(run: _Run) -> bool:
    return run.translator is not None and run.translator.response.status in TERMINAL_STATUSES


# Takeovers past max_takeovers that replay the journal to end the response failed; then it fails without
# a replay (whatever stops the replay would otherwise take it over again and again).
_FAILED_ENDINGS = 2


def _take_over(run: _Run, *, counted: bool) -> Outcome:
    """The response's worker was lost (or handed it off): replay its journal and go on.

    A response whose workers were lost more than ``max_takeovers`` times is replayed, then failed.
    """
    ctx, job = run.ctx, run.job
    key = redis_keys.takeovers(job.response_id)
    count = int(ctx.sync_redis.incr(key) if counted else ctx.sync_redis.get(key) or 0)
    ctx.sync_redis.expire(key, ctx.settings.event_ttl_seconds)
    steps = ctx.loop.run(read_journal(ctx.redis, job.response_id))
    log.warning("taking over %s (takeover %d, %d journal steps)", job.response_id, count, len(steps))
    TAKEOVERS.labels("takeover" if counted else "handoff").inc()
    if job.load_error is not None:
        # Nothing to replay the journal with (an earlier turn or its conversation deleted since): it ends
        # here, its failure after the events its lost worker wrote (a failure rendered from its start
        # would reuse their sequence numbers, be refused by Redis, and be taken over again, forever).
        log.warning("response %s failed: %s", job.response_id, job.load_error)
        return _fail_without_replay(run, str(job.load_error), job.load_error.code)
    if count > ctx.settings.max_takeovers:
        run.fail_after_replay = (
            f"worker_lost: the workers running this response stopped {count} time{'s' if count != 1 else ''}, more "
            f"than OSS_RESPONSES_MAX_TAKEOVERS={ctx.settings.max_takeovers}; it is not taken over again"
        )
        if count > ctx.settings.max_takeovers + _FAILED_ENDINGS:  # replaying to fail it failed too: fail it as is
            log.error("response %s failed: %s", job.response_id, run.fail_after_replay)
            return _fail_without_replay(run, run.fail_after_replay)
    elif ctx.loop.run(is_cancel_requested(ctx.redis, job.response_id)):
        run.stop_cause = "cancelled"
    if not steps and not ctx.sync_redis.exists(redis_keys.events(job.response_id)):
        log.error("%s: %s", job.response_id, PROGRESS_LOST_MESSAGE)
        return _fail_without_replay(run)
    if not steps and run.fail_after_replay is None:  # lost before its first flush: a fresh start
        run.first_sequence_number = ctx.loop.run(next_sequence_number(ctx.redis, job.response_id)) or 0
        return _execute(run)
    return _execute(run, steps)


def _fail_without_replay(run: _Run, message: str = PROGRESS_LOST_MESSAGE, code: str = "server_error") -> Outcome:
    """The response cannot be continued: Redis lost its stream and journal (a restart without persistence),
    or what it continues is gone. It fails, saying why; its stream gets that failure after its last event
    (a new stream holds it alone), then its end."""
    ctx, record = run.ctx, run.job.record
    end_failed(ctx.db, ctx.sync_redis, ctx.webhooks, record, failed_response(record, message, code),
               ctx.settings.event_ttl_seconds)
    return "failed"


def _leave_for_takeover(run: _Run) -> Outcome:
    """Redis lost a write of this response: stop generating and let the lease lapse (nothing written,
    nothing saved). Once Redis answers, the reaper dispatches a takeover, which replays the journal
    (whatever of it reached Redis) and writes the events the stream lacks."""
    ctx = run.ctx
    if run.generation is not None:
        ctx.loop.run(_abort(run.generation))
    run.lease.on_lost = None
    ctx.loop.run(_stop_renewing(run.lease))
    return "lease_lost"


async def _abort(generation: Generation) -> None:
    generation.stop("lease_lost")


async def _stop_renewing(lease: Lease) -> None:
    lease.stop_renewing()


def _hand_off(run: _Run) -> Outcome:
    """Shutting down: everything written, the lease released, the response queued for another worker."""
    ctx, job = run.ctx, run.job
    try:
        ctx.loop.run(ctx.writer.drain(job.response_id))
    except EventWriteError:
        log.exception("events of %s did not all reach Redis before its handoff", job.response_id)
    if ctx.dispatch is None:  # the reaper dispatches it once it sees the lease free
        ctx.loop.run(run.lease.release())
        return "handed_off"
    _send_again(run, HANDOFF, ctx.settings.event_ttl_seconds)
    log.info("handed %s off to another worker", job.response_id)
    return "handed_off"


def _send_again(run: _Run, mark: str, mark_seconds: int) -> None:
    """The response's task sent again for another worker. Marked first (``resume(id)``), so that the reaper
    does not dispatch it too; released before it is sent, so that the worker that gets it can take the lease."""
    ctx, job = run.ctx, run.job
    ctx.sync_redis.set(redis_keys.resume(job.response_id), mark, ex=mark_seconds)
    _release(run)
    if ctx.dispatch is not None:  # else the reaper dispatches it once the mark lapses
        ctx.dispatch(job.response_id, job.record.model, None)  # its credentials are sealed in its row


def _pass_on(run: _Run) -> Outcome:
    """The engine died under the response: what it streamed written, the lease released, and the response
    sent to another worker as a lost worker's is (no handoff mark: the takeover is counted, so that a
    request that kills every engine it meets fails after ``max_takeovers``). The mark holds the reaper
    off while the task waits, as its own dispatches do."""
    ctx, job = run.ctx, run.job
    try:
        ctx.loop.run(ctx.writer.drain(job.response_id))
    except EventWriteError:
        log.warning("events of %s did not all reach Redis before it was passed on", job.response_id, exc_info=True)
        return _leave_for_takeover(run)
    _send_again(run, "engine_lost", resume_wait_seconds(ctx.settings.lease_seconds))
    log.warning("passed %s on to another worker: this worker's engine stopped", job.response_id)
    return "engine_lost"


def _translator(
    run: _Run,
    approval_required: ApprovalPolicy | None = None,
    request: CreateResponseRequest | None = None,
    *,
    record: bool = True,
) -> JournaledTranslator:
    """Made before the prompt is rendered (the tool listings stream first); ``use_prompt`` follows.
    ``request``: what it offers the model (``offered_functions``, ``hosted_builtins``) and what its hosted
    tools' items show (``hosted_calls``); None only for a run that fails before generating.

    Its item ids are seeded by the response id, so a takeover's replay names items alike.
    """
    settings = run.ctx.settings
    translator = JournaledTranslator(
        run.job.response,
        encoding=run.ctx.encoding,
        first_sequence_number=run.first_sequence_number,
        approval_required=approval_required,
        max_tool_calls=None if run.job.load_error else run.job.record.request.get("max_tool_calls"),
        offered_functions=None if request is None else offered_functions(request),
        hosted_builtins=frozenset() if request is None else hosted_builtins(request, settings.builtin_tool_labels),
        hosted_calls=DEFAULT_HOSTED_CALLS if request is None else hosted_calls(request),
        seal=_reasoning_seal(run),
        id_seed=run.job.response_id,
    )
    if record:
        translator.record = partial(run.ctx.writer.append_journal, run.job.response_id)
    return translator


def _reasoning_seal(run: _Run) -> Callable[[list[dict[str, Any]]], str] | None:
    """Reasoning items carry encrypted_content only when the request's ``include`` asks for it."""
    sealer = run.ctx.sealer
    if sealer is None or REASONING_ENCRYPTED_CONTENT not in (run.job.record.request.get("include") or ()):
        return None
    return sealer.sealing("reasoning", run.job.record.owner)


def _fail(run: _Run, message: str, code: str = "server_error") -> None:
    try:
        run.ctx.loop.run(_fail_on_loop(run, message, code))
    except EventWriteError:  # the stream is already broken: _finish leaves the response to a takeover
        log.exception("the failure of %s could not be written to its stream", run.job.response_id)


async def _fail_on_loop(run: _Run, message: str, code: str) -> None:
    """The failure's events (on the loop, where the journal and the writer live)."""
    if run.translator is None:  # failed before generating: in_progress first, then failed
        run.ctx.writer.append_journal(run.job.response_id, ["begin", run.first_sequence_number])
        run.translator = _translator(run)
        events = run.translator.start() + run.translator.fail(message, code)
    else:
        events = run.translator.fail(message, code)
    if events:
        run.ctx.writer.append(run.job.response_id, events)


async def _generate(run: _Run, request: CreateResponseRequest) -> None:
    """On the engine loop: tools resolved, translator started, tools listed, prompt, then generation."""
    ctx, job = run.ctx, run.job
    ctx.writer.append_journal(job.response_id, ["begin", run.first_sequence_number])
    tools = await prepare_tools(ctx.mcp_pool, request, ctx.settings, job.record.owner)
    known = listed_tools(job.history, request.input_items())  # grows with this response's listings
    run.translator = _translator(run, approval_policy(tools.servers, known), request)
    ctx.writer.append(job.response_id, run.translator.start())
    await _list_then_generate(run, request, tools, known)


async def _list_then_generate(
    run: _Run, request: CreateResponseRequest, tools: PreparedTools, known: dict[str, Any],
    started: Collection[str] = (),
) -> None:
    """The tool listings still to do (``started``: opened by a lost worker), the prompt, the generation."""
    assert run.translator is not None
    emit = partial(run.ctx.writer.append, run.job.response_id)
    listed = await list_new_tools(tools, known, run.translator, emit, started) if tools.servers else {}
    known.update(listed)
    await _render(run, request, known)
    assert run.rendered is not None
    run.translator.use_prompt(
        mcp_labels=run.rendered.mcp_labels,
        input_tokens=len(run.rendered.token_ids),
        function_namespaces=run.rendered.function_namespaces,
    )
    _new_generation(run, request, tools, known)
    assert run.generation is not None
    await run.generation.run(run.rendered.token_ids, run.rendered.approval, forced=forced_tokens(run.ctx, request))


async def _resume(run: _Run, request: CreateResponseRequest, steps: list[Step]) -> None:
    """On the engine loop: the journal replayed (events the stream lacks written), then generation goes on.

    Lost before its prompt was rendered: the listings it left unfinished are done again into their
    items, and it goes on as a fresh run does.
    """
    ctx, job = run.ctx, run.job
    tools = await prepare_tools(ctx.mcp_pool, request, ctx.settings, job.record.owner)
    known = listed_tools(job.history, request.input_items())
    before, after = split_at_prompt(steps)
    known.update(listed_in(before))
    first = first_sequence_number(steps)
    if first is None:
        first = await next_sequence_number(ctx.redis, job.response_id) or 0
    run.first_sequence_number = first
    run.translator = _translator(
        run, approval_policy(tools.servers, known), request, record=False
    )
    events = [event for step in before for event in apply_translator_step(run.translator, step, None)]
    if after:
        await _render(run, request, known)
        assert run.rendered is not None
        _new_generation(run, request, tools, known)
        assert run.generation is not None
        events += run.generation.replay(run.rendered.token_ids, after, run.rendered.approval)
    run.translator.record = partial(ctx.writer.append_journal, job.response_id)
    await _write_missing(run, events)
    if run.fail_after_replay is not None:
        ctx.writer.append(job.response_id, run.translator.fail(run.fail_after_replay))
    elif not after:
        await _list_then_generate(run, request, tools, known, started=unfinished_listings(before))
    else:
        assert run.generation is not None
        run.generation.journal = run.translator.record
        await run.generation.resume(forced=forced_tokens(ctx, request))


async def _write_missing(run: _Run, events: list[Any]) -> None:
    """The replayed events the stream does not hold yet (a flush cut short), written now."""
    next_number = await next_sequence_number(run.ctx.redis, run.job.response_id)
    if next_number is None:
        raise JournalError("the stream of this response was closed while it was in progress")
    missing = [event for event in events if event.sequence_number >= next_number]
    if missing:
        run.ctx.writer.append(run.job.response_id, missing)


async def _render(run: _Run, request: CreateResponseRequest, known: dict[str, Any]) -> None:
    """The prompt rendered in the task thread (its error raised here), else rendered now."""
    early, run.early_prompt = run.early_prompt, None
    if isinstance(early, Exception):
        raise early
    run.rendered = early if early is not None else await render(run.ctx, run.job, request, known)


def _new_generation(run: _Run, request: CreateResponseRequest, tools: PreparedTools, known: dict[str, Any]) -> None:
    ctx, job = run.ctx, run.job
    assert run.translator is not None
    run.generation = Generation(
        job.response_id, ctx.engine, ctx.writer, run.translator, tools.executor, sampling(ctx, request, known),
        journal=run.translator.record,
        is_idempotent=idempotent_calls(ctx.settings, known),
        context_budget=prompt_budget(ctx, request),
    )
    if run.stop_cause is not None:
        run.generation.stop(run.stop_cause)


def _finish(run: _Run) -> Outcome:
    """Drain the events, store the turn, close the stream, move its events to SQL.

    Events that did not all reach Redis leave the response to a takeover, unsaved: saved, it would end
    in SQL while its stream lacks its last events and its end, and nothing would write them."""
    ctx, job, translator = run.ctx, run.job, run.translator
    assert translator is not None
    try:
        ctx.loop.run(ctx.writer.drain(job.response_id))
    except EventWriteError:
        log.warning("the last events of %s did not all reach Redis: leaving it to a takeover", job.response_id,
                    exc_info=True)
        return _leave_for_takeover(run)
    status = translator.response.status
    if status not in TERMINAL_STATUSES:  # a translator ends its response; a status-less one counts as failed
        status = "failed"
    # Not saved: either someone else ended it (and closed its stream) or the row was deleted meanwhile
    # (DELETE of a running response): then nobody else will end its stream.
    webhooks = planned_webhooks(ctx.webhooks, job.response_id, status, background=job.record.background)
    saved = _save_retrying(run, log_rows(webhooks))
    deleted = not saved and job.record.store and ctx.db.run(get_response, job.response_id) is None
    if saved or not job.record.store or deleted:
        ctx.loop.run(_close_stream(ctx, job.record, status))
    if saved and job.record.store:  # a response not stored has no row to hold its log, nor a reader later
        archive_event_log(ctx.db, ctx.sync_redis, job.response_id, ttl_seconds=ctx.settings.event_ttl_seconds)
    elif deleted:
        _log_deleted(ctx, job.response_id, status)
        drop_event_log(ctx.sync_redis, job.response_id)
    if saved:
        response_ended(ctx.webhooks, job.record.model, status, webhooks)
    return status


def _log_deleted(ctx: WorkerContext, response_id: str, status: str) -> None:
    """A row gone at the end of its run: a client's DELETE, which cancels first (``api/jobs.remove``: its flag
    is the mark), or a row the database lost (restored to a point before the response was created), which
    an operator must hear of: the response's output, streamed to its client, is stored nowhere."""
    if ctx.sync_redis.exists(redis_keys.cancel(response_id)):
        log.info("%s was deleted while it ran: its event log is dropped", response_id)
        return
    log.warning("%s ended %s but its row is gone from the database, and no client deleted it: the database was "
                "restored to a point before the response was created (a backup, or a failover to a lagging "
                "replica), or the row was removed by hand; its output is not stored and its event log is dropped",
                response_id, status)


def _save_retrying(run: _Run, webhooks: list[DeliveryRow]) -> bool:
    """Save the turn (and log its ``webhooks`` pending), retrying while the database is unreachable (a
    restart, a failover), for up to ``save_retry_seconds``: the stream already holds the terminal event, so
    SQL must follow it."""
    backoff = Backoff(run.ctx.settings.save_retry_seconds)
    while True:
        try:
            return _save(run, webhooks)
        except DBAPIError as exc:
            if not unreachable(exc) or backoff.exhausted() or run.lease.lost:
                raise
            log.warning("saving %s failed (%s): retrying in %.2fs", run.job.response_id, type(exc.orig).__name__,
                        backoff.delay)
            backoff.wait()


def _save(run: _Run, webhooks: list[DeliveryRow]) -> bool:
    job, translator = run.job, run.translator
    assert translator is not None
    rendered = run.rendered
    response = translator.response
    return run.ctx.db.run(
        ended_with_deliveries, webhooks, save_turn, job.response_id, store=job.record.store,
        status=response.status or "failed",
        response=response_json(response),
        output_messages=translator.output_messages,
        function_calls={**(rendered.function_calls if rendered else {}), **translator.function_calls},
        input_messages=rendered.new_messages if rendered else None,
        error=wire_json(response.error) if response.error else None,
        state=_state(job, rendered),
    )


def _state(job: Job, rendered: RenderedPrompt | None) -> dict[str, Any] | None:
    """vLLM's ``enable_response_messages`` shows the model's whole input: kept only when asked for."""
    if rendered is None or not job.record.request.get("enable_response_messages"):
        return None
    return {"prompt_messages": rendered.prompt_messages}


async def _close_stream(ctx: WorkerContext, record: ResponseRecord, status: str) -> None:
    """The end marker and the stream's TTL. A ``store: false`` response's stream has no reader once its own
    client read it (no route serves it, and it is not archived), yet holds its whole output: it expires
    after ``unstored_event_ttl_seconds``, not the day of a stored one's tombstone (Codex CLI sends every
    request unstored: ~90 KB of Redis each for the whole event TTL)."""
    response_id = record.id
    settings = ctx.settings
    ttl = None if record.store else min(settings.unstored_event_ttl_seconds, settings.event_ttl_seconds)
    ctx.writer.close(response_id, status, ttl_seconds=ttl)
    try:
        await ctx.writer.drain(response_id)
    except EventWriteError:  # the stream stays among the open ones: the reaper ends it (workers/unclosed.py)
        log.warning("closing the event stream of %s failed: the reaper closes it once Redis answers", response_id,
                    exc_info=True)
