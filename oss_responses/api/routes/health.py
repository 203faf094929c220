"""Liveness (``/healthz``: the process answers) and readiness (``/readyz``: SQL and Redis answer)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.orm import Session

from oss_responses.api.deps import ServicesDep

router = APIRouter(tags=["health"])

CHECK_TIMEOUT_SECONDS = 2.0


def _select_one(session: Session) -> None:
    session.execute(text("SELECT 1"))


async def _check(probe: Any) -> str:
    try:
        await asyncio.wait_for(probe, CHECK_TIMEOUT_SECONDS)
    except Exception as exc:  # any failure means "not ready"; the body says which
        return f"error: {type(exc).__name__}"
    return "ok"


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    database, redis = await asyncio.gather(
        _check(services.db.run(_select_one)), _check(services.redis.ping())
    )
    ready = database == "ok" and redis == "ok"
    body = {"status": "ok" if ready else "unavailable", "database": database, "redis": redis}
    return JSONResponse(body, status_code=200 if ready else 503)
