"""Liveness (``/healthz``: the process answers) and readiness (``/readyz``: the database answers, is
migrated and takes writes, Redis and the broker answer: what every create needs; and the event hub's
readers do not keep failing: what every stream needs, ``eventlog/hub.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.orm import Session

from oss_responses.api.deps import ServicesDep
from oss_responses.errors import ServiceUnavailable
from oss_responses.storage.migrations import database_revision, schema_behind

router = APIRouter(tags=["health"])

CHECK_TIMEOUT_SECONDS = 2.0


class NotMigrated(Exception):
    """The database answers but holds no schema, or one older than this build's: ``oss-responses migrate``
    was not run against it (yet: a new release's replicas stay unready until it has)."""


class ReadOnly(Exception):
    """The database answers but refuses writes (a failover's demoted primary, or maintenance's
    default_transaction_read_only): every create would be a 503."""


def _ready(session: Session) -> None:
    _migrated(session)
    if session.get_bind().dialect.name == "postgresql":
        if session.execute(text("SHOW transaction_read_only")).scalar() == "on":
            raise ReadOnly()


def _migrated(session: Session) -> None:
    if schema_behind(database_revision(session)):
        raise NotMigrated()


async def _check(probe: Any) -> str:
    try:
        await asyncio.wait_for(probe, CHECK_TIMEOUT_SECONDS)
    except Exception as exc:  # any failure means "not ready"; the body says which
        return f"error: {type(exc).__name__}"
    return "ok"


# HEAD too: some load balancers probe with it (uvicorn sends a HEAD answer without its body).
@router.api_route("/healthz", methods=["GET", "HEAD"])
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.api_route("/readyz", methods=["GET", "HEAD"])
async def readyz(services: ServicesDep) -> JSONResponse:
    database, redis, broker = await asyncio.gather(
        _check(services.db.run(_ready)), _check(services.redis.ping()), _check(services.tasks.ping())
    )
    hub_failing = services.hub.failing()
    event_hub = "ok" if hub_failing is None else f"error: {hub_failing}"
    ready = database == redis == broker == event_hub == "ok"
    body = {"status": "ok" if ready else "unavailable", "database": database, "redis": redis, "broker": broker,
            "event_hub": event_hub}
    if ready:
        return JSONResponse(body)
    return JSONResponse(body, status_code=503, headers={"Retry-After": str(ServiceUnavailable.RETRY_AFTER_SECONDS)})
