"""An engine that stopped answering: requests in it, and no output for any of them for a long while.

A dead engine core raises (vLLM's ``EngineDeadError``); a hung one raises nothing: a GPU that stopped
answering, a collective that never completes, a core process stopped by a debugger or a cgroup freeze.
vLLM waits on it forever (its execute-model timeout covers only a multi-process executor's workers, not
a model run in the core itself), and so would every response on the worker, their leases renewed. The
watch counts outputs (one increment per output, from the engine's output feeds) and, every few seconds
on the engine loop, compares the count with the last one: no change for ``seconds`` while requests ran
is a stall, which the engine treats as its death (``engine.base.EngineDead``).

A prefill of a long prompt, or a grammar compiling in the step, holds outputs back for seconds, not
minutes: the default (``OSS_RESPONSES_ENGINE_STALL_SECONDS``, 300 s, vLLM's own execute-model timeout)
leaves them far behind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class StallWatch:
    """``outputs`` is counted by the engine's feeds, ``running`` says how many requests the engine has now;
    ``check`` (or ``run``, its loop) calls ``on_stall`` once, with the reason, when requests ran ``seconds``
    without an output."""

    def __init__(self, seconds: float, on_stall: Callable[[str], None], running: Callable[[], int],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.outputs = 0  # outputs handed over, ever
        self._running = running
        self._on_stall = on_stall
        self._clock = clock
        self._seen = 0
        self._since: float | None = None  # since when requests ran without an output
        self.stalled = False

    def check(self) -> None:
        now, running = self._clock(), self._running()
        if self.stalled:
            return
        if running == 0 or self.outputs != self._seen:
            self._seen, self._since = self.outputs, (now if running else None)
            return
        if self._since is None:
            self._since = now
        elif now - self._since >= self.seconds:
            self.stalled = True
            self._on_stall(f"the engine gave no output for {now - self._since:.0f}s with {running} requests "
                           "running (OSS_RESPONSES_ENGINE_STALL_SECONDS): it is hung")

    async def run(self) -> None:
        period = min(5.0, self.seconds / 4)
        while not self.stalled:
            await asyncio.sleep(period)
            self.check()
