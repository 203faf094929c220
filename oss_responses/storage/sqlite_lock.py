"""One writer at a time on a SQLite file, waiting in the kernel instead of in SQLite's busy handler.

SQLite lets one connection write at a time; a writer that finds the lock taken sleeps in its busy
handler and tries again, after 1, 2, 5, 10, ... and then 100 ms at a time, however soon the lock
was freed. The API's accepts and the workers' writes (several processes on one file) met there:
bench/service.py's 8 concurrent accepts waited up to ~190 ms (p99) for a lock held a millisecond.

So every connection takes an exclusive ``flock`` on ``<database>-writer.lock`` just before its
transaction's first write statement, and lets it go when the connection goes back to its pool (after
the commit or rollback). A waiting writer then wakes the moment the lock is free, in whichever
process or thread. Reads are not locked (WAL lets them run beside the writer). Anything that writes
without this module (the sqlite3 shell, a migration run elsewhere) still meets SQLite's own lock and
its busy handler, as before.

A thread that writes on a second connection while its first holds the lock does not wait for itself
(SQLite's own lock then answers, as it did).

The lock file is opened read-only (``flock`` needs no more): on a filesystem turned read-only, or a lock
file whose permissions changed, opening it to write raised ``OSError`` before SQLite was asked, a 500
and a traceback in the API and a task failing in a loop in the worker, where SQLite's own refusal is
an outage (``storage/db.py`` ``refused_write``). One that cannot be opened at all (it is missing and its
folder takes no new file) leaves the write to SQLite's own lock, and to its own error if it refuses.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event

_HELD = "oss_responses_sqlite_writer"  # in a pooled connection's info while it holds the lock
# An execution option: the statement takes no lock (``/readyz``'s probe, which writes nothing and must not
# wait behind a writer).
UNLOCKED = "oss_responses_sqlite_unlocked"
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class WriterLock:
    """The file lock; each hold is a descriptor of its own, kept by the connection that took it (a
    connection may be checked in from another thread than its writer's, by the garbage collector)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._guard = threading.Lock()
        self._holders: set[int] = set()  # threads holding the lock (through one of their connections)

    def acquire(self) -> tuple[int, int] | None:
        """Wait for the lock; its hold (descriptor, thread id), or None if this thread holds it already or
        its file cannot be opened (SQLite's own lock answers then)."""
        thread = threading.get_ident()
        with self._guard:
            if thread in self._holders:
                return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        with self._guard:
            self._holders.add(thread)
        return fd, thread

    def release(self, hold: tuple[int, int]) -> None:
        fd, thread = hold
        with self._guard:
            self._holders.discard(thread)
        os.close(fd)  # closing the descriptor releases its flock


def is_write(statement: str) -> bool:
    return statement.lstrip()[:7].upper().startswith(_WRITES)


def install(engine: Engine, database_file: str) -> WriterLock:
    """The writer lock of ``database_file``, taken by every write transaction of ``engine``."""
    lock = WriterLock(Path(f"{database_file}-writer.lock"))

    def before_write(conn: Any, _cursor: Any, statement: str, _parameters: Any, context: Any, _many: bool) -> None:
        unlocked = context is not None and context.execution_options.get(UNLOCKED, False)
        if is_write(statement) and _HELD not in conn.info and not unlocked:
            conn.info[_HELD] = lock.acquire()

    def let_go(_dbapi_connection: Any, record: Any, *_args: Any) -> None:
        hold = record.info.pop(_HELD, None) if record is not None else None
        if hold is not None:
            lock.release(hold)

    event.listen(engine, "before_cursor_execute", before_write)
    for name in ("checkin", "invalidate", "close"):
        event.listen(engine.pool, name, let_go)
    return lock
