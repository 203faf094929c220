"""One migration at a time per database: the replicas of a deploy may each run ``migrate`` at once.

Without it each read the version table before any wrote it, all ran the same steps, and all but one
failed on what the first had created (PostgreSQL: 7 of 12 processes exited 1, "duplicate key value
violates unique constraint"; SQLite: "table responses already exists"). Holding the lock, a migration
reads the version table after the one before it committed, and finds nothing left to do.

PostgreSQL: a transaction-level advisory lock, the first statement of the migration's transaction, let
go by its commit or rollback. A session lock (taken, committed, the migration run, unlocked) leaked
behind a PgBouncer pooling transactions: each statement may run on another server connection, so the
unlock missed ("you don't own a lock"), the lock stayed on a pooled connection, and every later
``migrate`` waited for it forever (3 of 6 concurrent ones, then a direct one too). SQLite: an exclusive ``flock``
on ``<database>-migrate.lock`` beside the file (not the writers' lock of ``sqlite_lock.py``, which the
migration's own writes take).
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, text

# Any constant the service's other advisory locks (none today) do not use: "oss-resp" in ASCII.
ADVISORY_LOCK_KEY = 0x6F73732D72657370


@contextmanager
def one_migration_at_a_time(connection: Connection) -> Iterator[None]:
    """Entered inside the migration's transaction, before it reads the version table."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
        yield
        return
    database = connection.engine.url.database
    if connection.dialect.name != "sqlite" or database in (None, "", ":memory:"):
        yield
        return
    with open(f"{database}-migrate.lock", "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # let go when the file is closed
        yield

