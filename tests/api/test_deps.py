"""The routes' dependencies run on the event loop: FastAPI runs a plain ``def`` dependency in its
thread pool, a thread hop (and, under load, a wait for the GIL) on every request that uses it."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from oss_responses.api.routes import health, metrics, models, responses


def _dependencies(dependant: Dependant) -> Iterator[Dependant]:
    for sub in dependant.dependencies:
        yield sub
        yield from _dependencies(sub)


def test_route_dependencies_are_all_coroutines() -> None:
    routers = (health.router, metrics.router, models.router, responses.router)  # the app's (api/app.py)
    routes = [route for router in routers for route in router.routes if isinstance(route, APIRoute)]
    sync = {
        f"{route.path}: {sub.call.__name__}"
        for route in routes for sub in _dependencies(route.dependant)
        if sub.call is not None and not inspect.iscoroutinefunction(sub.call)
    }
    assert routes and not sync
