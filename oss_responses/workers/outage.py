"""A store that does not answer: the database restarting or failing over, Redis restarting.

Which errors say so (:func:`unreachable`), and the pause between two tries (:class:`Backoff`). A task
that meets one is run again here rather than failed: Celery acknowledges a task that raised
(``acks_late`` redelivers only a task whose worker died), so a response whose task failed that way
would stay ``queued`` until the reaper's stale sweep sends its task again (``stale_queued_seconds``:
ten minutes by default), its clients waiting all along.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from oss_responses.logs import safe_url
from oss_responses.outage_log import describe
from oss_responses.redis_refusals import refuses_writes
from oss_responses.storage import warm_statements
from oss_responses.storage.db import Database, refused_read_only, refused_write, schema_missing
from oss_responses.storage.migrations import database_revision, newest_revision, schema_behind


def unreachable(exc: BaseException) -> bool:
    """``exc`` says a store did not answer (worth trying again), not that the request was refused. A
    database refusing writes while it is read-only (a failover) counts: raised, it failed a response whose
    turn was generated (its takeovers then failed the same way, once a second, until it ended
    ``worker_lost``). So does a schema behind this build's code (a release's workers started before its
    migration ran): it failed every response they took, where the migration lets them run. So does a pool
    whose every connection stayed busy past its checkout timeout (a worker's threads outnumber its pool, and a
    lock holds the others' transactions): SQLAlchemy's own TimeoutError, no DBAPIError; raised, it failed the
    save of a generated turn (a traceback, the response taken over once its lease lapsed)."""
    if isinstance(exc, PoolTimeoutError):
        return True
    if isinstance(exc, DBAPIError):
        return (exc.connection_invalidated or isinstance(exc, (OperationalError, InterfaceError))
                or refused_read_only(exc) or schema_missing(exc))
    # A Redis refusing writes (full, read-only) is one too: failed, every queued response a full Redis met was.
    return isinstance(exc, (RedisConnectionError, RedisTimeoutError)) or refuses_writes(exc)


def outage(exc: BaseException) -> bool:
    """``exc``, or the error it was raised from (an ``EventWriteError``'s), says a store is away: redis-py's
    and SQLAlchemy's errors for it (:func:`unreachable`), or the event writer's own connection's (refused,
    reset, timed out)."""
    cause = told_cause(exc)
    return unreachable(cause) or isinstance(cause, (ConnectionError, TimeoutError))


def told_cause(exc: BaseException) -> BaseException:
    """The error that says what happened: the one ``exc`` was raised from (an ``EventWriteError``'s), but a
    SQLAlchemy error itself, not the driver's it wraps (its ``__cause__``): judged by the driver's, a
    database outage counted as none, and its WARNING carried a traceback."""
    if isinstance(exc, SQLAlchemyError):
        return exc
    return exc.__cause__ or exc


def warn_failed(
    logger: logging.Logger, exc: BaseException, message: str, *args: object, outage_level: int = logging.WARNING
) -> None:
    """``message`` as a WARNING naming the error it met, in one line; with its traceback only if that is no
    outage: a Redis or database restart is a known condition, and each retried call had logged its traceback.
    ``outage_level``: the line's level for an outage, where other lines already tell it (INFO)."""
    is_outage = outage(exc)
    logger.log(outage_level if is_outage else logging.WARNING, message + " (%s)", *args, describe(told_cause(exc)),
               exc_info=not is_outage)


class Backoff:
    """Pauses doubling from 0.25 s to 5 s, for up to ``seconds`` in all."""

    def __init__(self, seconds: float) -> None:
        self.delay = 0.25
        self._deadline = time.monotonic() + seconds

    def exhausted(self) -> bool:
        """The next try would start past the deadline."""
        return time.monotonic() + self.delay > self._deadline

    def wait(self) -> None:
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, 5.0)


log = logging.getLogger(__name__)


class StoreAwayAtStart(RuntimeError):
    """A store did not answer while the worker started; the worker must not serve."""


def wait_for_redis(url: str, seconds: float, stopping: Callable[[], bool] = lambda: False) -> None:
    """A worker starting while its Redis does not answer waits for it, a line per try, for up to ``seconds``;
    then, or once ``stopping`` (a SIGTERM meanwhile), it raises :class:`StoreAwayAtStart`. Without it the
    start blocked on the cancel listener's subscription for good, deaf to SIGTERM, a traceback a second."""
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    backoff = Backoff(seconds)
    try:
        while True:
            try:
                client.ping()
                return
            except (redis.RedisError, OSError) as exc:
                if backoff.exhausted() or stopping():
                    raise StoreAwayAtStart(f"Redis at {safe_url(url)} did not answer ({exc})") from None
                log.warning("Redis at %s does not answer (%s); the worker waits for it (next try in %.2fs)",
                            safe_url(url), exc, backoff.delay)
                backoff.wait()
    finally:
        client.close()


def wait_for_database(database: Database, seconds: float, stopping: Callable[[], bool] = lambda: False) -> None:
    """A worker starting on a database that is not ready for it (:func:`_not_ready`) waits for it, a line per
    try, for up to ``seconds``; then, or once ``stopping``, it raises :class:`StoreAwayAtStart`. Every database
    statement of the start runs here, so that none meets an outage outside the wait: without it a database
    behind this build's schema (a release's workers started before its migration ran) stopped Celery with
    "Unrecoverable error" and the SQL, and so did a SQLite file or filesystem turned read-only (the warm
    statements' UPDATE refused, two tracebacks), while a worker already running waits for either
    (``unreachable``)."""
    shown = database.url.render_as_string(hide_password=True)
    backoff = Backoff(seconds)
    while True:
        why = _not_ready(database)
        if why is None:
            return
        if backoff.exhausted() or stopping():
            raise StoreAwayAtStart(f"the database at {shown} {why}")
        log.warning("the database at %s %s; the worker waits for it (next try in %.2fs)", shown, why,
                    backoff.delay)
        backoff.wait()


def _not_ready(database: Database) -> str | None:
    """Why this worker cannot run on the database yet, or None once it answers, holds this build's schema
    and takes the start's writes: the warm statements (an UPDATE of no row, which compiles them now, not
    in the first response) are refused as any write is by a database that is read-only (a failover's
    demoted primary, a SQLite file or filesystem turned read-only). A full disk lets them pass (they need
    no page): the worker meets it at its first save, as a running worker does. Then its pool's connections
    are opened (a PostgreSQL at ``max_connections`` refuses them)."""
    try:
        revision = database.run(database_revision)
        if schema_behind(revision):
            return (f"is at revision {revision or 'none'}, behind this release's {newest_revision()}: "
                    "run `oss-responses migrate`")
        database.run(warm_statements)
        database.open_pool()
    except DBAPIError as exc:
        # Before unreachable(): SQLite's refusals are OperationalErrors, which it counts as not answering.
        if (refused := refused_write(exc)) is not None:
            return f"is refusing writes ({refused})"
        if not unreachable(exc):
            raise
        lines = str(exc.orig).strip().splitlines()
        return f"did not answer ({lines[0] if lines else type(exc).__name__})"
    return None
