"""Stopping a background task that talks to Redis.

``Task.cancel()`` is a request, and a task awaiting a redis-py command can ignore it: the command
completes and the task goes on as if nothing was asked. Measured with redis-py 8.1 (a task
cancelled at a random point of an ``EVAL``, 300 tries): uvloop, the worker's engine loop, let 200
of the cancels go unseen; asyncio's own loop 3. A loop whose extra iteration would do harm (the
lease's keep-alive) therefore checks after every await whether it should still run, and whoever
stops a task cancels it until it is done.
"""

from __future__ import annotations

import asyncio
from typing import Any

# Between two cancels: long enough for the awaited command to finish, short for a stop.
_RECANCEL_SECONDS = 0.05


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` until it is done (a cancel can be lost, see above); its outcome is dropped."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=_RECANCEL_SECONDS)
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved
