"""``GET /metrics``: Prometheus's text format (see ``api/metrics.py`` for multiprocess mode)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from oss_responses.api.deps import ServicesDep

router = APIRouter(tags=["metrics"])


@router.get("/metrics")
async def metrics(services: ServicesDep) -> Response:
    return Response(await services.metrics.render(), media_type=CONTENT_TYPE_LATEST)
