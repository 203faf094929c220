"""Writes of a response kept back by the event writer until its run's start is saved in SQL.

A fresh run starts generating while its task thread saves the start (queued → in_progress): on a GPU the
prompt's prefill then hides that write, which was on the path to the first token (~10 ms at 8 concurrent
starts on one worker, ``bench/service.py`` (e)). The API's cancel of the queued response may win that save;
then the run must leave nothing behind (the API ended its stream), so until the save lands its writes wait
here, in their order: released, they are written as if just made; dropped, they and every later write of
the run are forgotten (the run is stopping).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

Write = Callable[[], None]  # a writer call made again on release


class _Hold:
    __slots__ = ("writes", "over")

    def __init__(self) -> None:
        self.writes: list[Write] | None = []  # None: dropped
        self.over = asyncio.Event()  # released or dropped


class Holds:
    """The responses whose writes are held, on the writer's loop."""

    def __init__(self) -> None:
        self._holds: dict[str, _Hold] = {}

    def __bool__(self) -> bool:  # the writer's per-event check: no hold at all, nothing to look up
        return bool(self._holds)

    def hold(self, response_id: str) -> None:
        self._holds[response_id] = _Hold()

    def keep(self, response_id: str, write: Write) -> bool:
        """Whether the response's writes are held: then ``write`` is kept for the release (or dropped)."""
        hold = self._holds.get(response_id)
        if hold is None:
            return False
        if hold.writes is not None:
            hold.writes.append(write)
        return True

    def release(self, response_id: str) -> list[Write]:
        """The response's writes are no longer held: those kept, in order, to be made now."""
        hold = self._holds.get(response_id)
        if hold is None or hold.writes is None:  # a dropped run stays dropped until it ends
            return []
        del self._holds[response_id]
        hold.over.set()
        return hold.writes

    def drop(self, response_id: str) -> None:
        """What the response kept, and whatever it writes until ``forget``, is forgotten."""
        hold = self._holds.get(response_id)
        if hold is not None:
            hold.writes = None
            hold.over.set()

    def forget(self, response_id: str) -> None:
        """The run ended: its response's writes are made again as they come (a dropped run's next one)."""
        self._holds.pop(response_id, None)

    async def over(self, response_id: str) -> None:
        """Wait while the response's writes are held (until released or dropped)."""
        hold = self._holds.get(response_id)
        if hold is not None:
            await hold.over.wait()
