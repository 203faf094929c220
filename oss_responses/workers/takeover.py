"""Taking over a response whose worker was lost (or handed it off): what the takeover does, decided here.

Every translator call and engine call is journaled (``workers/journal.py``). A response found
``in_progress`` lost its worker (the reaper dispatched it again, or Celery redelivered its task): once
this worker holds its lease, ``take_over`` counts the takeover, reads the journal and either ends the
response (taken over too often, its journal overwritten, its progress lost with Redis) or gives the
steps to replay; ``runner`` runs them (``on_loop.resume``: a fresh translator replays them, the events
the stream lacks are written, and generation resumes; the client's stream goes on with the next
sequence number). Apart from ``runner`` so that the decisions read on their own; the run itself stays
with ``runner._execute``, which a takeover shares with a fresh start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis.exceptions import ResponseError

from oss_responses import redis_keys
from oss_responses.metrics import TAKEOVERS
from oss_responses.redis_refusals import wrong_type
from oss_responses.workers.cancel import is_cancel_requested
from oss_responses.workers.journal import Step, read_journal
from oss_responses.workers.reaper import end_failed, failed_response
from oss_responses.workers.run_state import Outcome, Run
from oss_responses.workers.stream_tail import next_sequence_number

log = logging.getLogger(__name__)

PROGRESS_LOST_MESSAGE = (
    "event_log_lost: Redis lost this response's events and progress (was it restarted without "
    "persistence?); it cannot be continued"
)

JOURNAL_OVERWRITTEN_MESSAGE = (
    "event_log_lost: this response's journal in Redis was overwritten (its key holds something other than a "
    "list: set by hand, by another application or by a bug), so its progress cannot be replayed; it cannot be "
    "continued"
)


@dataclass(frozen=True)
class Replay:
    """A takeover to run: its journal's ``steps`` replayed, or (None: lost before its first flush) a fresh start."""
    steps: list[Step] | None


# Takeovers past max_takeovers that replay the journal to end the response failed; then it fails without
# a replay (whatever stops the replay would otherwise take it over again and again).
_FAILED_ENDINGS = 2


def take_over(run: Run, *, counted: bool) -> Outcome | Replay:
    """The response's worker was lost (or handed it off): its journal's steps to replay and go on (``Replay``,
    which ``runner`` runs), or its end when it cannot go on.

    A response whose workers were lost more than ``max_takeovers`` times is replayed, then failed.
    """
    ctx, job = run.ctx, run.job
    count = _count_takeover(run, counted=counted)
    try:
        steps = ctx.loop.run(read_journal(ctx.redis, job.response_id))
    except ResponseError as exc:
        if not wrong_type(exc):
            raise
        return _fail_journal_overwritten(run)
    # INFO: whoever found the loss told it (the reaper's dispatch, the run's own line, a stopping worker's handoff)
    log.info("taking over %s (takeover %d, %d journal steps)", job.response_id, count, len(steps))
    TAKEOVERS.labels("takeover" if counted else "handoff").inc()
    if job.load_error is not None:
        # Nothing to replay the journal with (an earlier turn or its conversation deleted since): it ends
        # here, its failure after the events its lost worker wrote (a failure rendered from its start
        # would reuse their sequence numbers, be refused by Redis, and be taken over again, forever).
        log.warning("response %s failed: %s", job.response_id, job.load_error)
        return fail_without_replay(run, str(job.load_error), job.load_error.code)
    if count > ctx.settings.max_takeovers:
        run.fail_after_replay = (
            f"worker_lost: the workers running this response stopped {count} time{'s' if count != 1 else ''}, more "
            f"than OSS_RESPONSES_MAX_TAKEOVERS={ctx.settings.max_takeovers}; it is not taken over again"
        )
        if count > ctx.settings.max_takeovers + _FAILED_ENDINGS:  # replaying to fail it failed too: fail it as is
            log.error("response %s failed: %s", job.response_id, run.fail_after_replay)
            return fail_without_replay(run, run.fail_after_replay)
    elif ctx.loop.run(is_cancel_requested(ctx.redis, job.response_id)):
        run.stop_cause = "cancelled"
    if not steps and not ctx.sync_redis.exists(redis_keys.events(job.response_id)):
        log.error("%s: %s", job.response_id, PROGRESS_LOST_MESSAGE)
        return fail_without_replay(run)
    if not steps and run.fail_after_replay is None:  # lost before its first flush: a fresh start
        run.first_sequence_number = ctx.loop.run(next_sequence_number(ctx.redis, job.response_id)) or 0
        return Replay(None)
    return Replay(steps)


def _count_takeover(run: Run, *, counted: bool) -> int:
    """The response's takeovers so far, this one included when ``counted`` (a handoff is not). A counter key
    holding another type or no integer (by hand, another application, a bug) raised here after the lease was
    taken: the task raised, let the lease go, and the reaper dispatched it again a second later, for good. Its
    count is unknown: it starts again from this takeover, a WARNING naming the key. The bound holds: every later
    takeover counts up from there (at most max_takeovers more), where failing the response would end one that
    can go on."""
    ctx, response_id = run.ctx, run.job.response_id
    key = redis_keys.takeovers(response_id)
    try:
        count = int(ctx.sync_redis.incr(key) if counted else ctx.sync_redis.get(key) or 0)
    except (ResponseError, ValueError) as exc:
        if isinstance(exc, ResponseError) and not (wrong_type(exc) or str(exc).startswith("value is not an integer")):
            raise
        count = 1 if counted else 0
        log.warning("the takeovers key %s held something other than a count (overwritten by hand, another "
                    "application or a bug): %s's count starts again at %d", key, response_id, count)
        ctx.sync_redis.set(key, count)
    ctx.sync_redis.expire(key, ctx.settings.event_ttl_seconds)
    return count


def _fail_journal_overwritten(run: Run) -> Outcome:
    """Its journal's key holds something other than a list: what its lost run did cannot be replayed, and the run
    whose journal write was refused so left it to this takeover. Its stream is whole: it fails after its last
    event, as a response whose progress Redis lost does (its close deletes the key, as every end deletes the
    journal). Read as it was, the journal raised WRONGTYPE after the lease was taken: the task raised, let the
    lease go, and the reaper dispatched it again a second later, for good."""
    key = redis_keys.journal(run.job.response_id)
    log.warning("the journal key %s holds something other than a list (overwritten by hand, another application "
                "or a bug): failing %s", key, run.job.response_id)
    return fail_without_replay(run, JOURNAL_OVERWRITTEN_MESSAGE)


def fail_without_replay(run: Run, message: str = PROGRESS_LOST_MESSAGE, code: str = "server_error") -> Outcome:
    """The response cannot be continued: Redis lost its stream and journal (a restart without persistence),
    or what it continues is gone. It fails, saying why; its stream gets that failure after its last event
    (a new stream holds it alone), then its end."""
    ctx, record = run.ctx, run.job.record
    end_failed(ctx.db, ctx.sync_redis, ctx.webhooks, record, failed_response(record, message, code),
               ctx.settings.stream_ttl_seconds(record.store))
    return "failed"
