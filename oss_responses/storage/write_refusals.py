"""What a process's own writes to a SQLite file last met: a refusal (its disk full, the file read-only, its
writes failing) and when, until one of its writes commits a change again.

``/readyz`` reads it (``api/routes/health.py``): a full disk refuses only writes that need room, so the only
cheap way to know of one is to have met it; a probe that made room for itself each time would write to the
database every few seconds. Kept by the API (``AsyncDatabase``) on a SQLite file only: PostgreSQL tells its
read-only state when asked, and a worker does not answer /readyz; these listeners would cost their statements
for nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, ExceptionContext, event

from oss_responses.storage.sqlite_lock import is_write

_CHANGED = "oss_responses_changed_rows"  # in a connection's info while its transaction changed a row


class WriteRefusals:
    """The last refusal of this process's writes, and when it came; shared by its engines' threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._why: str | None = None
        self._at = 0.0

    def refused(self, why: str) -> None:
        with self._lock:
            self._why, self._at = why, self._clock()

    def wrote(self) -> None:
        """A write committed a change: whatever refused writes before is over."""
        with self._lock:
            self._why = None

    def took_write_lock(self) -> None:
        """A write took the database's write lock: a read-only refusal (a refusal of that lock) is over; a
        full disk is not (a write needs room, not only the lock)."""
        with self._lock:
            if self._why == "read-only":
                self._why = None

    def standing(self, within: float) -> str | None:
        """Why writes were last refused, if no write committed a change since and it was at most ``within``
        seconds ago; None otherwise."""
        with self._lock:
            if self._why is None or self._clock() - self._at > within:
                return None
            return self._why


def watch(engine: Engine, refusals: WriteRefusals, refusal: Callable[[BaseException], str | None]) -> None:
    """``refusals`` told of ``engine``'s writes: each error that ``refusal`` names a refused write, each commit
    of a transaction whose writes changed a row (a statement that changed nothing proves no room)."""

    def changed(conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if cursor.rowcount > 0 and is_write(statement):
            conn.info[_CHANGED] = True

    def committed(conn: Any) -> None:
        # Before the driver's commit: a commit that fails then is told by handle_error, after this.
        if conn.info.pop(_CHANGED, False):
            refusals.wrote()

    def rolled_back(conn: Any) -> None:
        if not conn.invalidated:  # a dropped connection's info is gone with it (and reading it raises)
            conn.info.pop(_CHANGED, None)

    def failed(context: ExceptionContext) -> None:
        why = refusal(context.original_exception)
        if why is not None:
            refusals.refused(why)

    event.listen(engine, "after_cursor_execute", changed)
    event.listen(engine, "commit", committed)
    event.listen(engine, "rollback", rolled_back)
    event.listen(engine, "handle_error", failed)
