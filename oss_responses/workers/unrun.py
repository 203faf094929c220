"""A response whose task raised before it ran: failed at once, saying so.

A task that raises is acknowledged (Celery's ``acks_late`` still acks a failure), so a response whose
run broke before it started (a bug in loading or rendering it, or a database refusing it in a way no
retry mends: PgBouncer's lost prepared statements did this) stayed ``queued`` until the stale sweep sent
it again, ``OSS_RESPONSES_STALE_QUEUED_SECONDS`` later, its waiting client held all that time, and then
the same again. An outage is not this: the task retries it (``workers/tasks.py``). A response running
(``in_progress``) or leased elsewhere is left to its worker, or to the reaper's takeovers.
"""

from __future__ import annotations

import logging

from oss_responses import redis_keys
from oss_responses.storage import get_response
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.reaper import end_failed, failed_response

log = logging.getLogger(__name__)

# Not the exception's text: a database error's carries its SQL and parameters, the request's data.
MESSAGE = "The response failed in the worker before it started ({}). Retry it; the worker's log has the cause."


def fail_unrun(ctx: WorkerContext, response_id: str, exc: Exception) -> bool:
    """Fail the response if it is still queued and nobody holds its lease; True if this failed it."""
    record = ctx.db.run(get_response, response_id)
    if record is None or record.status != "queued" or ctx.sync_redis.exists(redis_keys.lease(response_id)):
        return False
    response = failed_response(record, MESSAGE.format(type(exc).__name__))
    ttl = ctx.settings.stream_ttl_seconds(record.store)
    if not end_failed(ctx.db, ctx.sync_redis, ctx.webhooks, record, response, ttl, from_statuses=("queued",)):
        return False
    log.error("response %s failed before it started: %s", response_id, type(exc).__name__)
    return True
