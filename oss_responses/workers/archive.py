"""A finished response's event log moved from Redis to SQL, by the worker that ended it.

Runs in the task thread right after the stream was closed (and the turn saved): the closed stream is
read whole, its frames stored compressed in ``event_logs`` (expiring with the stream's TTL), then the
stream is trimmed to its tombstone (``eventlog/archive.py``); a response deleted while it ran has no row
for its frames, and its stream becomes a tombstone of none. Each step only follows the one before,
so a failure at any point leaves a readable log: the full stream (until its TTL), or the full stream
and its SQL copy, or the tombstone and its SQL copy. Nothing here fails the response, and nothing is
retried: a failure costs Redis memory until the TTL, not correctness, while a retry would hold the
task's slot (the save before it is retried: there SQL must follow the stream).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from oss_responses.eventlog.archive import ClosedStream, leave_tombstone, read_closed_stream
from oss_responses.storage import Database, get_response, save_event_log, utcnow
from oss_responses.workers.outage import warn_failed

log = logging.getLogger(__name__)

# The SQL copy outlives the tombstone: a reader that found the tombstone always finds the frames.
OUTLIVE_TOMBSTONE = timedelta(minutes=5)


def archive_event_log(db: Database, redis: Redis, response_id: str, *, ttl_seconds: int) -> bool:
    """True if the stream is now a tombstone and its frames are in SQL."""
    try:
        closed = read_closed_stream(redis, response_id)
        if closed is None:
            return False
        ttl = timedelta(milliseconds=closed.ttl_ms) if closed.ttl_ms > 0 else timedelta(seconds=ttl_seconds)
        expires_at = utcnow() + ttl + OUTLIVE_TOMBSTONE
        try:
            db.run(save_event_log, response_id, closed.first_sequence_number, closed.frames, expires_at)
        except IntegrityError:
            if db.run(get_response, response_id) is not None:
                raise
            _drop(redis, response_id, closed)  # deleted since its end was saved
            log.info("%s was deleted since it ended: its event log is dropped", response_id)
            return False
        return leave_tombstone(redis, response_id, closed)
    except (RedisError, SQLAlchemyError) as exc:
        warn_failed(log, exc, "archiving the event log of %s failed: it stays in Redis until its TTL", response_id)
        return False


def drop_event_log(redis: Redis, response_id: str) -> None:
    """A response deleted while it ran (its caller logs why): its events go with it. The tombstone, of no
    archived event (-1), still ends the stream for whoever follows it."""
    try:
        closed = read_closed_stream(redis, response_id)
        if closed is not None:
            _drop(redis, response_id, closed)
    except RedisError as exc:
        warn_failed(log, exc, "dropping the event log of deleted %s failed: it stays in Redis until its TTL",
                    response_id)


def _drop(redis: Redis, response_id: str, closed: ClosedStream) -> None:
    leave_tombstone(redis, response_id, replace(closed, first_sequence_number=0, frames=[]))
