"""An engine that stopped answering: requests in it, and no sign of life from its core for a long while.

A dead engine core raises (vLLM's ``EngineDeadError``); a hung one raises nothing: a GPU that stopped
answering, a collective that never completes, a core process stopped by a debugger or a cgroup freeze.
vLLM waits on it forever (its execute-model timeout covers only a multi-process executor's workers, not
a model run in the core itself), and so would every response on the worker, their leases renewed. The
watch counts outputs (one increment per output, from the engine's output feeds) and, every few seconds
on the engine loop, compares the count with the last one.

No output for this process's requests does not make a hung core: with several worker front ends over one
core (engine/frontends.py), one front end's requests can all wait in the core's queue (its KV cache full)
while the core generates the other front ends' for minutes. So a check that saw no new output asks the core
itself (``probe``: a vLLM utility call, which the core's busy loop answers between two steps); an answer is
a sign of life as an output is. A core stuck inside a step (a GPU hang) or stopped never answers: no output
and no answer for ``seconds`` while requests ran is a stall, which the engine treats as its death
(``engine.base.EngineDead``).

A prefill of a long prompt, or a grammar compiling in the step, holds the core for seconds, not minutes:
the default (``OSS_RESPONSES_ENGINE_STALL_SECONDS``, 300 s, vLLM's own execute-model timeout) leaves them
far behind.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from oss_responses.stopping import cancel_and_wait

log = logging.getLogger(__name__)


class StallWatch:
    """``outputs`` is counted by the engine's feeds, ``running`` says how many requests the engine has now,
    ``probe`` returns once the engine core answered a call (it may wait forever on a hung core); ``check`` (or
    ``run``, its loop) calls ``on_stall`` once, with the reason, when requests ran ``seconds`` without an output
    or an answer. ``check`` runs on the loop that runs the probes."""

    def __init__(self, seconds: float, on_stall: Callable[[str], None], running: Callable[[], int],
                 probe: Callable[[], Awaitable[object]], clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.outputs = 0  # outputs handed over, ever
        self.answers = 0  # probes the engine core answered, ever
        self._running = running
        self._on_stall = on_stall
        self._probe = probe
        self._clock = clock
        self._seen = 0
        self._since: float | None = None  # since when requests ran without an output or an answer
        self._probing: asyncio.Task[None] | None = None  # the probe waiting for the core's answer
        self.stalled = False

    def check(self) -> None:
        now, running = self._clock(), self._running()
        if self.stalled:
            return
        signs = self.outputs + self.answers
        if running == 0 or signs != self._seen:
            self._seen, self._since = signs, (now if running else None)
            return
        if self._since is None:
            self._since = now
        elif now - self._since >= self.seconds:
            self.stalled = True
            self._on_stall(f"the engine gave no output for {now - self._since:.0f}s with {running} requests "
                           "running, and its core answered no call meanwhile (OSS_RESPONSES_ENGINE_STALL_SECONDS): "
                           "it is hung")
            return
        if self._probing is None:  # no output since the last check: is the core alive, busy with others' requests?
            self._probing = asyncio.get_running_loop().create_task(self._ask())

    async def _ask(self) -> None:
        try:
            await self._probe()
        except Exception:  # a dead core: its requests get vLLM's error; this is no sign of life
            log.debug("the engine core's probe failed", exc_info=True)
        else:
            self.answers += 1
        finally:
            self._probing = None

    async def run(self) -> None:
        period = min(5.0, self.seconds / 4)
        try:
            while not self.stalled:
                await asyncio.sleep(period)
                self.check()
        finally:
            await cancel_and_wait(self._probing)  # on a hung core it would wait forever
