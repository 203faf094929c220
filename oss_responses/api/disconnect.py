"""Racing a request's work against its client going away (plain JSON responses, not SSE)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before the response was ready."""


async def _disconnected(request: Request) -> None:
    # The body has been read, so the next ASGI message is http.disconnect when the client leaves.
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """``await work``, or raise ClientDisconnected (cancelling the work) if the client leaves first."""
    work_task = asyncio.ensure_future(work)
    watch_task = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({work_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch_task.cancel()
        if not work_task.done():
            work_task.cancel()
    if work_task.done() and not work_task.cancelled():
        return work_task.result()
    raise ClientDisconnected
