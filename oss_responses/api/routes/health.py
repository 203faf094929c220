"""Liveness (``/healthz``: the process answers) and readiness (``/readyz``: the database answers, is
migrated and takes writes, Redis and the broker answer: what every create needs; and the event hub's
readers do not keep failing: what every stream needs, ``eventlog/hub.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

from oss_responses.api.deps import ServicesDep
from oss_responses.errors import ServiceUnavailable
from oss_responses.storage import AsyncDatabase, sqlite_lock
from oss_responses.storage.db import SQLITE_BUSY, SQLITE_BUSY_TIMEOUT_MS, refused_write, sqlite_result_code
from oss_responses.storage.migrations import database_revision, schema_behind

router = APIRouter(tags=["health"])

CHECK_TIMEOUT_SECONDS = 2.0


class NotMigrated(Exception):
    """The database answers but holds no schema, or one older than this build's: ``oss-responses migrate``
    was not run against it (yet: a new release's replicas stay unready until it has)."""


class RefusingWrites(Exception):
    """The database answers but refuses writes (``storage/db.py`` ``refused_write``: read-only, its disk full,
    its writes failing): every create would be a 503."""

    def __init__(self, why: str) -> None:
        super().__init__(f"refusing writes ({why})")


# How long a write refused (on SQLite) keeps this replica unready unless a write of its own changes a row
# sooner. Bounded: an unready replica gets no requests from its load balancer, so none of its writes would
# ever end it; past this its next write tells again (a create refused meanwhile is the 503 it would be).
REFUSAL_HOLD_SECONDS = 30.0

# An UPDATE of no row: refused at once by a connection that holds its SQLite file read-only, and otherwise
# changes nothing, so its commit writes nothing to the database (not even its write-ahead log).
_WRITE_PROBE = text("UPDATE responses SET id = id WHERE id = ''")


def _ready(session: Session) -> None:
    _migrated(session)
    if session.get_bind().dialect.name == "postgresql":
        if session.execute(text("SHOW transaction_read_only")).scalar() == "on":
            raise RefusingWrites("read-only")
    else:
        _probe_sqlite_writes(session)


def _probe_sqlite_writes(session: Session) -> None:
    """Raises SQLite's refusal if this process's connection may not write the file (it or its filesystem
    read-only): the probe, run without the writer lock and without SQLite's busy wait, as a probe must not
    queue behind writers. A writer holding SQLite's lock is one that writes: no refusal."""
    connection = session.connection()
    connection.exec_driver_sql("PRAGMA busy_timeout=0")
    try:
        connection.execute(_WRITE_PROBE, execution_options={sqlite_lock.UNLOCKED: True})
    except OperationalError as exc:
        if sqlite_result_code(exc) != SQLITE_BUSY:
            raise
    finally:
        if not connection.invalidated:  # dropped for a read-only refusal (storage/db.py): nothing to restore
            connection.exec_driver_sql(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")


async def _database_ready(db: AsyncDatabase) -> None:
    """Raises unless the database answers, is migrated and takes writes: a refusal met now, or by this
    process's last write (a full disk lets the probe pass: only a write that needs room meets it)."""
    try:
        await db.run(_ready)
    except DBAPIError as exc:
        if (why := refused_write(exc)) is None:
            raise
        raise RefusingWrites(why) from None
    db.write_refusals.took_write_lock()
    if (why := db.write_refusals.standing(REFUSAL_HOLD_SECONDS)) is not None:
        raise RefusingWrites(why)


def _migrated(session: Session) -> None:
    if schema_behind(database_revision(session)):
        raise NotMigrated()


async def _check(probe: Any) -> str:
    try:
        await asyncio.wait_for(probe, CHECK_TIMEOUT_SECONDS)
    except RefusingWrites as exc:
        return f"error: {exc}"
    except Exception as exc:  # any failure means "not ready"; the body says which
        return f"error: {type(exc).__name__}"
    return "ok"


# HEAD too: some load balancers probe with it (uvicorn sends a HEAD answer without its body). A route of its
# own, with its own operationId: one route for both methods gave both one id, which OpenAPI forbids.
@router.get("/healthz")
@router.head("/healthz", operation_id="healthz_head")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
@router.head("/readyz", operation_id="readyz_head")
async def readyz(services: ServicesDep) -> JSONResponse:
    database, redis, broker = await asyncio.gather(
        _check(_database_ready(services.db)), _check(services.redis.ping()), _check(services.tasks.ping())
    )
    hub_failing = services.hub.failing()
    event_hub = "ok" if hub_failing is None else f"error: {hub_failing}"
    ready = database == redis == broker == event_hub == "ok"
    body = {"status": "ok" if ready else "unavailable", "database": database, "redis": redis, "broker": broker,
            "event_hub": event_hub}
    if ready:
        return JSONResponse(body)
    return JSONResponse(body, status_code=503, headers={"Retry-After": str(ServiceUnavailable.RETRY_AFTER_SECONDS)})
