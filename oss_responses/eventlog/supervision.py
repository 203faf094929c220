"""The event hub's long-running tasks (its two readers, its heartbeat timer) kept running.

A reader that raises anything but a failed read (an entry or reply it did not expect, a bug) had ended its
task unseen, and its lane's followers waited on keep-alives for good. :class:`Supervisor` logs it with its
traceback and starts it again, after a pause that doubles with each failure in the last
``FAILURE_WINDOW_SECONDS``; one that keeps failing makes the hub unready (``failing``, shown by ``/readyz``).
Nothing of this runs per event or per read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# A task that raised starts again after RESTART_SECONDS, doubled with each failure within the window, up to
# RESTART_MAX_SECONDS; one that failed UNREADY_FAILURES times within the window makes the hub unready.
RESTART_SECONDS = 0.5
RESTART_MAX_SECONDS = 8.0
FAILURE_WINDOW_SECONDS = 60.0
UNREADY_FAILURES = 3


class Supervisor:
    def __init__(self) -> None:
        self._failures: dict[str, list[float]] = {}  # when each supervised task raised, within the window

    def failing(self) -> str | None:
        """What keeps failing: a task that raised ``UNREADY_FAILURES`` times within the last
        ``FAILURE_WINDOW_SECONDS``; None when nothing does."""
        now = time.monotonic()
        for what, failures in self._failures.items():
            recent = sum(1 for at in failures if now - at < FAILURE_WINDOW_SECONDS)
            if recent >= UNREADY_FAILURES:
                return f"the event hub's {what} failed {recent} times in {FAILURE_WINDOW_SECONDS:.0f} s"
        return None

    async def run(
        self, what: str, run: Callable[[], Awaitable[None]], after_failure: Callable[[], None] | None = None
    ) -> None:
        """``run()`` for as long as the hub runs, started again after it raised; ``after_failure`` is called
        first (a reader's failure may have left its followers behind its streams' cursors)."""
        failures = self._failures.setdefault(what, [])
        while True:
            try:
                await run()
            except Exception:
                now = time.monotonic()
                failures[:] = [at for at in failures if now - at < FAILURE_WINDOW_SECONDS] + [now]
                delay = min(RESTART_SECONDS * 2 ** (len(failures) - 1), RESTART_MAX_SECONDS)
                log.exception("event hub: its %s raised (failure %d in the last %.0f s); it starts again in %.1f s",
                              what, len(failures), FAILURE_WINDOW_SECONDS, delay)
                if after_failure is not None:
                    after_failure()
                await asyncio.sleep(delay)
