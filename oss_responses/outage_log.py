"""A store's outage told in a few log lines: when it began, a reminder now and then, when it ended.

A loop that retries a store every half second logged each failed try, with its traceback: the API's event
hub wrote 24 tracebacks (two lanes, each its own) while Redis was down for 6 s, and would write one line
every quarter second for as long as an outage lasts. An outage is a known condition: its error says what
happened, and the traceback says nothing more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from oss_responses.storage.db import refused_write

REMIND_SECONDS = 30.0


def describe(exc: BaseException) -> str:
    """``exc`` in one line: its type and its message's first line (SQLAlchemy's add the SQL and a link on
    lines of their own, which split a log line in three)."""
    lines = str(exc).strip().splitlines()
    # A message-less error (asyncio's TimeoutError) is its type alone, not "TimeoutError: ".
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class OutageLog:
    """One outage at a time of ``what`` (a store, as the lines name it), told by ``log``; shared by every
    loop that retries that store, so that they tell it once together (a worker's task threads and its
    reaper's and sweeper's threads included: its state is kept under a lock)."""

    def __init__(self, log: logging.Logger, what: str, *, remind_seconds: float = REMIND_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 refusal: Callable[[BaseException], str | None] = lambda _exc: None) -> None:
        """``refusal``: why an error is the store refusing writes (its disk full, read-only), or None: such
        an outage is told as one, and ends only with a write (``answered``)."""
        self._log = log
        self._what = what
        self._refusal = refusal
        self._refused: str | None = None  # why the outage's last try was refused a write, if it was
        self._remind_seconds = remind_seconds
        self._clock = clock
        self._since: float | None = None  # the outage's first failed try
        self._told = 0.0  # when it was last told
        self._tries = 0
        self._last: BaseException | None = None  # the last failed try's error
        self._lock = threading.Lock()

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException, *, waited: float = 0.0) -> None:
        """A try failed for an outage: told if it is the first, or the last line is ``remind_seconds`` old.
        ``waited``: how long the try had gone unanswered before it failed. The store was away since it was
        sent: a frozen Redis's first failed try comes at the event writer's 10 s give-up, and its end line,
        counted from that failure, said "after 2.0 s" of a 12 s freeze."""
        with self._lock:
            now = self._clock()
            self._tries += 1
            self._last = exc
            self._refused = self._refusal(exc)
            if self._since is None:
                self._since, self._told = now - waited, now
                if self._refused:
                    self._log.warning("%s refuses writes (%s: %s); retrying until it takes them", self._what,
                                      self._refused, describe(exc))
                else:
                    self._log.warning("%s unreachable (%s); retrying until it answers", self._what, describe(exc))
                return
            self._since = min(self._since, now - waited)  # a try sent before the first failed one began it sooner
            if now - self._told >= self._remind_seconds:
                self._told = now
                self._log.warning("%s still %s after %.0f s (%s); retrying", self._what,
                                  "refusing writes" if self._refused else "unreachable", now - self._since,
                                  describe(exc))

    def answered(self, *, wrote: bool = True) -> None:
        """A try succeeded: an outage, if there was one, is over and told so. ``wrote``: the try wrote; one
        that only read does not end an outage of refused writes (reads go on through a full disk): a
        worker's reaper's passes, which read, told a SQLite disk full over each second, and the next save's
        refusal told it begun again (22 pairs of lines in 40 s)."""
        if self._since is None:  # the usual case, unlocked: a stale read at worst tells it on the next answer
            return
        with self._lock:
            if self._since is None or (self._refused and not wrote):
                return
            assert self._last is not None
            self._log.warning("%s %s again after %.1f s (%d failed tries, the last %s)", self._what,
                              "takes writes" if self._refused else "answers", self._clock() - self._since,
                              self._tries, describe(self._last))
            self._since, self._tries, self._last, self._refused = None, 0, None, None


class StoreOutages:
    """A worker's two stores' outages, each told in a few lines (:class:`OutageLog`) by all the loops that
    retry it together: its task threads' retries (a response's save, its task's), its reaper's passes, its
    webhook sweeper's. Each had logged every try (the reaper a line a second, a save a line per backoff
    step, the sweeper a traceback a pass) for as long as the database was away."""

    def __init__(self, logger: logging.Logger) -> None:
        self.database = OutageLog(logger, "the database", refusal=refused_write)
        self.redis = OutageLog(logger, "Redis")

    def of(self, exc: BaseException) -> OutageLog:
        """The outage log of the store that ``exc`` (an outage: ``workers.outage.outage``) came from."""
        from_database = isinstance(exc, SQLAlchemyError) or isinstance(exc.__cause__, SQLAlchemyError)
        return self.database if from_database else self.redis

    def failed(self, exc: BaseException) -> None:
        """A try failed for an outage (``workers.outage.outage``): told by its store's log."""
        self.of(exc).failed(exc)

    def pass_answered(self, *, read_database: bool) -> None:
        """A periodic pass (the reaper's, the webhook sweeper's) went through: Redis answered its pass lock's
        command, and the database too if the pass ran (a pass another worker holds asks it nothing). A pass
        only reads: an outage of refused writes is not over for it."""
        self.redis.answered()
        if read_database:
            self.database.answered(wrote=False)

