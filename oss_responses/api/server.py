"""The API's uvicorn server: uvicorn's own, except that an idle process wakes once a second, not ten times.

uvicorn's main loop sleeps 0.1 s at a time between its checks for a shutdown request (and its date
header refresh, once a second). Those ten wakes a second were nearly all of an idle API process's CPU:
2.9 ms/s against 0.4 with one wake a second (the same server, no request, this 2-core machine), and at a
slow GPU's pace idle CPU weighs on every token (``bench/engine.py``). Here a shutdown signal wakes the
loop at once instead, so stopping is as prompt as before, and the date header still changes every second.

Only the single-process mode uses it: with ``api_processes`` above 1, uvicorn's supervisor builds its
own servers in the processes it spawns.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import FrameType

import uvicorn

TICK_SECONDS = 1.0
_TICKS_PER_SECOND = 10  # uvicorn's on_tick counts tenths of a second: its date refresh is at multiples of 10
_COUNTER_WRAP = 864_000  # uvicorn's own wrap, a day of tenths


class ApiServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, *, tick_seconds: float = TICK_SECONDS) -> None:
        super().__init__(config)
        self.tick_seconds = tick_seconds
        self._wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    async def main_loop(self) -> None:
        woken = asyncio.Event()
        self._wake = (asyncio.get_running_loop(), woken)
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + _TICKS_PER_SECOND) % _COUNTER_WRAP
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tick_seconds):
                    await woken.wait()
        self._wake = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """A signal (or a caller in another thread) asks to stop: wake the main loop to see it now."""
        super().handle_exit(sig, frame)
        wake = self._wake
        if wake is not None:
            loop, woken = wake
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing left to wake
                loop.call_soon_threadsafe(woken.set)
