"""Engines and sessions: ``Database`` (sync; workers, migrations) and ``AsyncDatabase`` (the API).

Built on demand from a URL, never at import time. Either form of a URL works for both classes: the
driver is chosen here (``sqlite`` / ``sqlite+aiosqlite``, ``postgresql+psycopg`` sync or async).
Several processes (API, workers) share one SQLite file, so every SQLite connection gets WAL, a busy
timeout, and foreign keys (which SQLite leaves off, and the cascades need). On SQLite, the API's
``AsyncDatabase.run`` runs each transaction in a pool thread with the sync driver (see there), and
every write transaction on a SQLite file takes a file lock first (``sqlite_lock.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import anyio
from sqlalchemy import URL, Engine, ExceptionContext, create_engine, event, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool

from oss_responses.storage import sqlite_lock, write_refusals
from oss_responses.storage.write_refusals import WriteRefusals

P = ParamSpec("P")
T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000
_SQLITE_PRAGMAS = (f"busy_timeout={SQLITE_BUSY_TIMEOUT_MS}", "journal_mode=WAL", "synchronous=NORMAL",
                   "foreign_keys=ON")


def sync_url(url: str | URL) -> URL:
    return _with_driver(url, sqlite="sqlite", postgresql="postgresql+psycopg")


def async_url(url: str | URL) -> URL:
    return _with_driver(url, sqlite="sqlite+aiosqlite", postgresql="postgresql+psycopg")


def _with_driver(url: str | URL, *, sqlite: str, postgresql: str) -> URL:
    parsed = make_url(url)
    drivers = {"sqlite": sqlite, "postgresql": postgresql}
    backend = parsed.get_backend_name()
    if backend not in drivers:
        raise ValueError(f"unsupported database URL {parsed.render_as_string(hide_password=True)!r}")
    return parsed.set(drivername=drivers[backend])


# PostgreSQL's read_only_sql_transaction: a primary demoted by a failover (or a standby reached before the
# address moved, or default_transaction_read_only during maintenance) refuses every write until the
# new primary is reached. It passes as a refused connection does; psycopg raises it as an InternalError.
READ_ONLY_SQLSTATE = "25006"


def refused_read_only(exc: BaseException) -> bool:
    """``exc`` (SQLAlchemy's, or the driver's own) is a write the database refused for being read-only for
    now (a failover under way)."""
    driver_error = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(driver_error, "sqlstate", None) == READ_ONLY_SQLSTATE


# SQLite's primary result codes for a write its file refused: SQLITE_READONLY (the file, or its filesystem,
# turned read-only: a remount, a permission change), SQLITE_IOERR (a write the filesystem failed, as one
# turned read-only under an open connection does), SQLITE_FULL (its disk full). Each passes once its
# operator acts, as a failover does; Python's sqlite3 raises all three as an OperationalError.
_SQLITE_WRITE_REFUSED = {8: "read-only", 10: "disk I/O error", 13: "disk full"}
SQLITE_BUSY = 5  # another connection holds the write lock


def sqlite_result_code(exc: BaseException) -> int | None:
    """SQLite's primary result code of ``exc`` (SQLAlchemy's, or the driver's own); None if it is no SQLite error."""
    driver_error = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(driver_error, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def refused_write(exc: BaseException) -> str | None:
    """Why the database refused a write for now (its disk full, or read-only: a PostgreSQL failover, a
    SQLite file or filesystem), in a few words; None if ``exc`` (SQLAlchemy's, or the driver's) is no such
    refusal. Reads go on meanwhile: an outage that only writes meet."""
    if refused_read_only(exc):
        return "read-only"
    code = sqlite_result_code(exc)
    return None if code is None else _SQLITE_WRITE_REFUSED.get(code)


_SCHEMA_MISSING_SQLITE = ("no such table", "no such column", "has no column named")
_SCHEMA_MISSING_SQLSTATES = ("42P01", "42703")  # PostgreSQL's undefined_table, undefined_column


def schema_missing(exc: BaseException) -> bool:
    """``exc`` names a table or column the database lacks: it was never migrated, or it is behind this
    build's code (a release deployed before its migration ran, or a database restored from before it).
    Not a bug of the request's: the operator's ``oss-responses migrate`` ends it."""
    driver_error = exc.orig if isinstance(exc, DBAPIError) else exc
    return (any(text in str(driver_error) for text in _SCHEMA_MISSING_SQLITE)
            or getattr(driver_error, "sqlstate", None) in _SCHEMA_MISSING_SQLSTATES)


def _sqlite_file(url: URL) -> str | None:
    """The file of a SQLite URL; None for an in-memory database or another backend."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return url.database


def ensure_sqlite_directory(url: str | URL) -> None:
    """Create the folder of a SQLite file (``./var/`` by default) so connecting can create the file. One that
    cannot be created (a read-only filesystem, a path through a file or a folder not the user's) is left to
    the connect, which fails as a database that does not answer ("unable to open database file"): each
    command says so in its way (``migrate`` in one line, the API unready, a worker waiting), where this
    mkdir's error had ended ``migrate`` and the API's and the worker's starts in tracebacks."""
    database = _sqlite_file(make_url(url))
    if database is not None:
        with contextlib.suppress(OSError):
            Path(database).parent.mkdir(parents=True, exist_ok=True)


# Connections a pool opens beyond its ``pool_size`` for a burst (SQLAlchemy's own default, stated
# here because a PostgreSQL server's max_connections must cover it: README, PostgreSQL).
BURST_CONNECTIONS = 10


def most_connections(pool_size: int) -> int:
    """The most connections one process's pool of ``pool_size`` opens at once (what a PostgreSQL
    server's max_connections must leave room for, per API or worker process)."""
    return pool_size + BURST_CONNECTIONS


# libpq's guards against a peer gone silent (a blackholed link, a lost NAT entry or load-balancer flow:
# no RST ever comes). Without them a connect waited for the kernel (~2 min of SYN retries), and a
# statement whose reply never came waited for good (keepalives only after libpq's default of 2 hours
# idle), holding its pool slot: in a worker, a response's save stuck so while its lease went on being
# renewed (never taken over), in the API a request. A dead connection is now known within ~25 s idle
# (keepalives) or 30 s of unacknowledged data (tcp_user_timeout, Linux), and raised as an
# OperationalError: an outage to the worker (workers/outage.py), a 503 to the API. A URL's own
# ``?keepalives_idle=...`` (any of these) is kept.
PG_SILENT_PEER_GUARDS: dict[str, int] = {
    "connect_timeout": 10, "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
    "keepalives_count": 3, "tcp_user_timeout": 30_000,
}


def _engine_options(url: URL, pool_size: int | None, prepared_statements: bool = True) -> dict[str, Any]:
    """``pool_size``: connections kept open for reuse. SQLAlchemy keeps 5 and opens up to 10 more for
    a burst, closing each again when it is returned: on PostgreSQL every such connection is a new
    server process, forked and authenticated, and 8 concurrent requests cost it ~4 ms of CPU each
    (bench/service.py --phases e --database postgresql: 5.3-5.8 ms per request against 1.7 ms with
    enough connections kept). An in-memory SQLite database has one connection, nothing to size."""
    sqlite = url.get_backend_name() == "sqlite"
    in_memory = sqlite and _sqlite_file(url) is None
    options: dict[str, Any] = {} if sqlite else {"pool_pre_ping": True}
    if not sqlite:
        options["connect_args"] = {key: value for key, value in PG_SILENT_PEER_GUARDS.items() if key not in url.query}
    if not sqlite and not prepared_statements:
        # psycopg prepares a statement once one connection ran it 5 times; through a PgBouncer pooling
        # transactions the next run may land on another server connection ("prepared statement
        # \"_pg3_0\" does not exist"). None: never prepare (the URL cannot say None, only a string).
        options["connect_args"]["prepare_threshold"] = None
    if pool_size is not None and not in_memory:
        options |= {"pool_size": pool_size, "max_overflow": BURST_CONNECTIONS}
    return options


def _set_sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    for pragma in _SQLITE_PRAGMAS:
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


def _configure(engine: Engine) -> None:
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _set_sqlite_pragmas)
    event.listen(engine, "handle_error", _drop_connections_to_read_only)


def _drop_connections_to_read_only(context: ExceptionContext) -> None:
    """A write refused as read-only leaves the pool's connections unfit for writes once the database takes
    them again, so they are all dropped, as after a lost connection, and the next checkout connects anew.
    On PostgreSQL it means a failover: they lead to the demoted primary (where ``pool_pre_ping``'s probe
    still passes). On SQLite, a connection that opened its file while the file or its filesystem refused
    writing opened it read-only, and stays so for good: a worker that waited at its start for the file to
    take writes again waited on (its pooled connection), and an API went on answering 503."""
    if refused_write(context.original_exception) == "read-only":
        context.is_disconnect = True


class Database:
    """A sync engine and its sessions; ``session()`` is one transaction (commit, or rollback on error)."""

    def __init__(self, url: str | URL, *, pool_size: int | None = None, prepared_statements: bool = True,
                 **engine_options: Any) -> None:
        self.url = sync_url(url)
        ensure_sqlite_directory(self.url)
        options = _engine_options(self.url, pool_size, prepared_statements)
        self.engine = create_engine(self.url, **(options | engine_options))
        _configure(self.engine)
        database = _sqlite_file(self.url)
        if database is not None:
            sqlite_lock.install(self.engine, database)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    def run(self, fn: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(session, *args, **kwargs)`` in one transaction; its result."""
        with self.session() as session:
            return fn(session, *args, **kwargs)

    def open_pool(self) -> None:
        """Open every connection the pool keeps, now: a worker pays for them while it starts, not in
        its first burst of responses (8 new PostgreSQL connections at once took 13-21 ms here on an
        idle machine, and 30 ms of the worker's first-token path under load)."""
        pool = self.engine.pool
        if isinstance(pool, QueuePool):
            connections = [self.engine.connect() for _ in range(pool.size())]
            for connection in connections:
                connection.close()

    def dispose(self) -> None:
        self.engine.dispose()


class AsyncDatabase:
    """An async engine for the API; ``run`` executes a sync data-access function via ``run_sync``."""

    def __init__(self, url: str | URL, *, pool_size: int | None = None, prepared_statements: bool = True,
                 **engine_options: Any) -> None:
        self.url = async_url(url)
        ensure_sqlite_directory(self.url)
        self.engine: AsyncEngine = create_async_engine(
            self.url, **(_engine_options(self.url, pool_size, prepared_statements) | engine_options)
        )
        _configure(self.engine.sync_engine)
        self._sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        # SQLite: each transaction runs whole in one pool thread (sqlite3, sync). Through aiosqlite,
        # every statement is a hop between the loop and the connection's thread, and a writer holds
        # SQLite's one write lock across those hops while concurrent writers sleep in its busy handler
        # (1, 2, 5, 10... ms): concurrent accepts queued behind each other.
        self._threaded = (
            Database(url, pool_size=pool_size, **engine_options) if self.url.get_backend_name() == "sqlite" else None
        )
        # What this process's writes to a SQLite file last met, for /readyz (write_refusals.py says why);
        # every transaction runs in the threaded engine.
        self.write_refusals = WriteRefusals()
        if self._threaded is not None and _sqlite_file(self.url) is not None:
            write_refusals.watch(self._threaded.engine, self.write_refusals, refused_write)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        async with self._sessions.begin() as session:
            yield session

    async def run(self, fn: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(session, *args, **kwargs)`` in one transaction; its result."""
        if self._threaded is not None:
            return await anyio.to_thread.run_sync(partial(self._threaded.run, fn, *args, **kwargs))
        async with self.session() as session:
            return await session.run_sync(fn, *args, **kwargs)

    async def dispose(self) -> None:
        if self._threaded is not None:
            self._threaded.dispose()
        await self.engine.dispose()
