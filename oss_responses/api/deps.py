"""Dependencies of the routes, as ``Annotated`` aliases: signatures read ``(services: ServicesDep, ...)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import Depends, Query
from starlette.requests import HTTPConnection

from oss_responses.api.auth import Owner, authenticate
from oss_responses.api.services import Services
from oss_responses.config import Settings


# ``async def`` although they only read attributes: FastAPI runs a plain ``def`` dependency in its
# thread pool, a hop to a thread and back (and a wait for the GIL under load) on every request.
# An ``HTTPConnection``: a request or a WebSocket (``WS /v1/responses``).
async def get_services(request: HTTPConnection) -> Services:
    return _services(request)


async def get_settings(request: HTTPConnection) -> Settings:
    return _services(request).settings


def _services(request: HTTPConnection) -> Services:
    services: Services = request.app.state.services
    return services


async def get_owner(request: HTTPConnection) -> Owner:
    """The owner of the request's API key (keys mode: 401 without a valid one), or ``auth.OPEN``."""
    services = _services(request)
    return await authenticate(services.settings, services.db, request.headers.get("authorization"))


@dataclass(frozen=True, slots=True)
class PageQuery:
    """A list endpoint's page: the items after the item ``after``, at most ``limit``, in ``order``."""

    after: str | None
    limit: int
    order: Literal["asc", "desc"]


async def get_page(
    after: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> PageQuery:
    return PageQuery(after=after, limit=limit, order=order)


ServicesDep = Annotated[Services, Depends(get_services)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
OwnerDep = Annotated[Owner, Depends(get_owner)]
PageDep = Annotated[PageQuery, Depends(get_page)]
