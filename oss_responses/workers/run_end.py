"""How a response ends in the worker: a run's end, and a queued response cancelled for Celery.

- ``finish``: the run's events drained, its turn saved (retried while the database is unreachable) with
  its webhooks logged pending, its stream closed, its event log archived to SQL (or dropped, its row gone:
  logged why), its end announced. Events that did not all reach Redis leave it to a takeover instead.
- ``cancel_revoked`` (``end_queued``): a queued response whose task Celery revoked is cancelled, its
  stream closed and its end announced; ``cancel_terminated``: a running one whose task Celery was told
  to terminate is cancelled through every worker's listener.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from oss_responses import redis_keys
from oss_responses.cancel_request import cancel_everywhere
from oss_responses.eventlog.writes import EventWriteError
from oss_responses.harmony.render import RenderedPrompt
from oss_responses.outage_log import describe
from oss_responses.statuses import TERMINAL_STATUSES
from oss_responses.storage import ResponseRecord, cancel_queued, get_response, save_turn
from oss_responses.storage.records import SEALING_PLAN
from oss_responses.storage.webhook_deliveries import DeliveryRow, ended_with_deliveries
from oss_responses.webhooks.notify import log_rows
from oss_responses.wire import response_json, wire_json
from oss_responses.workers.archive import archive_event_log, drop_event_log
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.ended import planned_webhooks, response_ended
from oss_responses.workers.handoff import leave_for_takeover
from oss_responses.workers.job import Job
from oss_responses.workers.outage import Backoff, unreachable, warn_failed
from oss_responses.workers.run_state import Outcome, Run
from oss_responses.workers.unclosed import list_open_stream

log = logging.getLogger(__name__)


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
    list_open_stream(ctx.sync_redis, response_id)
    # Lost: it left the queue meanwhile (a duplicate of its task runs it), or it ended.
    return "cancelled" if end_queued(ctx, record) else "skipped"


def cancel_terminated(ctx: WorkerContext, response_id: str) -> None:
    """A running task that Celery was told to terminate (``celery control revoke ID --terminate``): its
    response is cancelled as a client's cancel does, through every worker's listener, since the pool
    cannot kill the thread that runs it (``workers/pool.py``)."""
    cancel_everywhere(ctx.sync_redis, response_id, ctx.settings.event_ttl_seconds)


def end_queued(ctx: WorkerContext, record: ResponseRecord) -> bool:
    """A queued response cancelled, its stream closed and its end announced; False if it was not queued."""
    webhooks = planned_webhooks(ctx.webhooks, record.id, "cancelled", background=record.background)
    if not ctx.db.run(ended_with_deliveries, log_rows(webhooks), cancel_queued, record.id, record.response):
        return False
    ctx.loop.run(_close_stream(ctx, record, "cancelled"))
    response_ended(ctx.webhooks, record.model, "cancelled", webhooks)
    return True


def finish(run: Run) -> Outcome:
    """Drain the events, store the turn, close the stream, move its events to SQL.

    Events that did not all reach Redis leave the response to a takeover, unsaved: saved, it would end
    in SQL while its stream lacks its last events and its end, and nothing would write them."""
    ctx, job, translator = run.ctx, run.job, run.translator
    assert translator is not None
    try:
        ctx.loop.run(ctx.writer.drain(job.response_id))
    except EventWriteError as exc:
        warn_failed(log, exc, "the last events of %s did not all reach Redis: leaving it to a takeover",
                    job.response_id, outage_level=logging.INFO)  # as the runner's line: the reaper's tells it
        return leave_for_takeover(run)
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


def _save_retrying(run: Run, webhooks: list[DeliveryRow]) -> bool:
    """Save the turn (and log its ``webhooks`` pending), retrying while the database is unreachable (a
    restart, a failover), for up to ``save_retry_seconds``: the stream already holds the terminal event, so
    SQL must follow it."""
    backoff = Backoff(run.ctx.settings.save_retry_seconds)
    outage = run.ctx.outages.database  # its tries told with the worker's other loops that retry the database
    first = True
    while True:
        try:
            saved = _save(run, webhooks)
        except SQLAlchemyError as exc:  # a driver's error, or the pool's checkout timing out
            if not unreachable(exc) or backoff.exhausted() or run.lease.lost:
                raise
            if first:  # a line per response that waits, not one per try (it was five in an 8 s restart)
                log.warning("saving %s failed (%s): retrying until the database answers, for up to %.0f s",
                            run.job.response_id, describe(exc), run.ctx.settings.save_retry_seconds)
                first = False
            outage.failed(exc)
            backoff.wait()
            continue
        outage.answered()
        return saved


def _save(run: Run, webhooks: list[DeliveryRow]) -> bool:
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
        state=_state(job, rendered, translator.sealing_plan),
    )


def _state(job: Job, rendered: RenderedPrompt | None, sealing_plan: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the turn keeps beside its messages. The translator's sealing plan, when it sealed or would have
    sealed anything: a retrieve with ``include`` seals by it (``api/sealed.py``). vLLM's
    ``enable_response_messages`` shows the model's whole input: kept only when asked for."""
    state: dict[str, Any] = {SEALING_PLAN: sealing_plan} if sealing_plan else {}
    if rendered is not None and job.record.request.get("enable_response_messages"):
        state["prompt_messages"] = rendered.prompt_messages
    return state or None


async def _close_stream(ctx: WorkerContext, record: ResponseRecord, status: str) -> None:
    """The end marker and the stream's TTL. A ``store: false`` response's stream has no reader once its own
    client read it (no route serves it, and it is not archived), yet holds its whole output: it expires
    after ``unstored_event_ttl_seconds``, not the day of a stored one's tombstone (Codex CLI sends every
    request unstored: ~90 KB of Redis each for the whole event TTL)."""
    response_id = record.id
    ctx.writer.close(response_id, status, ttl_seconds=ctx.settings.stream_ttl_seconds(record.store))
    try:
        await ctx.writer.drain(response_id)
    except EventWriteError as exc:  # the stream stays among the open ones: the reaper ends it (workers/unclosed.py)
        warn_failed(log, exc, "closing the event stream of %s failed: the reaper closes it once Redis answers",
                    response_id)
