"""Stopping background tasks whose cancel can go unseen (a task inside a redis-py command on uvloop)."""

from __future__ import annotations

import asyncio

from oss_responses.stopping import cancel_and_wait


def test_cancel_and_wait_stops_task_that_ignored_a_cancel() -> None:
    async def body() -> tuple[int, bool]:
        cancels_seen = 0

        async def stubborn() -> None:
            nonlocal cancels_seen
            while True:
                try:
                    await asyncio.sleep(1)
                except asyncio.CancelledError:
                    cancels_seen += 1
                    if cancels_seen > 1:
                        raise  # the first one is swallowed, as redis-py did

        task = asyncio.create_task(stubborn())
        await asyncio.sleep(0)
        await cancel_and_wait(task)
        return cancels_seen, task.cancelled()

    assert asyncio.run(body()) == (2, True)


def test_cancel_and_wait_retrieves_failure_of_task() -> None:
    async def body() -> bool:
        async def failing() -> None:
            raise RuntimeError("boom")

        task = asyncio.create_task(failing())
        await asyncio.sleep(0)
        await cancel_and_wait(task)
        await cancel_and_wait(None)
        return task.done()

    assert asyncio.run(body())
