"""What the event hub's tests share: the sequence numbers a subscription yields, and waiting for the
hub's state where no event marks it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from oss_responses.eventlog import parse_frame


async def collect(frames: AsyncIterator[bytes], limit: int | None = None) -> list[int]:
    """Sequence numbers of the frames (until the iterator ends, or ``limit`` of them)."""
    numbers = []
    async for data in frames:
        numbers.append(parse_frame(data)["sequence_number"])
        if len(numbers) == limit:
            break
    return numbers


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Let other tasks run until ``predicate()`` holds (hub state that has no event to await)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0)
