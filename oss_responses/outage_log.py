"""A store's outage told in a few log lines: when it began, a reminder now and then, when it ended.

A loop that retries a store every half second logged each failed try, with its traceback: the API's event
hub wrote 24 tracebacks (two lanes, each its own) while Redis was down for 6 s, and would write one line
every quarter second for as long as an outage lasts. An outage is a known condition: its error says what
happened, and the traceback says nothing more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

REMIND_SECONDS = 30.0


class OutageLog:
    """One outage at a time of ``what`` (a store, as the lines name it), told by ``log``; shared by every
    loop that retries that store, so that they tell it once together."""

    def __init__(self, log: logging.Logger, what: str, *, remind_seconds: float = REMIND_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = log
        self._what = what
        self._remind_seconds = remind_seconds
        self._clock = clock
        self._since: float | None = None  # the outage's first failed try
        self._told = 0.0  # when it was last told
        self._tries = 0
        self._last: BaseException | None = None  # the last failed try's error

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> None:
        """A try failed for an outage: told if it is the first, or the last line is ``remind_seconds`` old."""
        now = self._clock()
        self._tries += 1
        self._last = exc
        if self._since is None:
            self._since, self._told = now, now
            self._log.warning("%s unreachable (%s: %s); retrying until it answers", self._what,
                              type(exc).__name__, exc)
        elif now - self._told >= self._remind_seconds:
            self._told = now
            self._log.warning("%s still unreachable after %.0f s (%s: %s); retrying", self._what,
                              now - self._since, type(exc).__name__, exc)

    def answered(self) -> None:
        """A try succeeded: an outage, if there was one, is over and told so."""
        if self._since is None:
            return
        self._log.warning("%s answers again after %.1f s (%d failed tries, the last %s: %s)", self._what,
                          self._clock() - self._since, self._tries, type(self._last).__name__, self._last)
        self._since, self._tries, self._last = None, 0, None
