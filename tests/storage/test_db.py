from __future__ import annotations

import asyncio
import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.exc import DBAPIError, OperationalError
from support.db_connections import (
    async_connects_in_two_rounds,
    connects_in_two_rounds,
    counted_connects,
    hold_transactions,
)
from support.rows import new_response
from support.sqlite_refusals import fill, full_database

from oss_responses.storage import (
    AsyncDatabase,
    Database,
    async_url,
    get_response,
    insert_response,
    sync_url,
)
from oss_responses.storage.db import PG_SILENT_PEER_GUARDS, refused_read_only, refused_write
from oss_responses.workers.outage import unreachable


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///var/x.db", "sqlite+aiosqlite:///var/x.db"),
        ("sqlite+aiosqlite:///var/x.db", "sqlite+aiosqlite:///var/x.db"),
        ("postgresql://u@h:5/d", "postgresql+psycopg://u@h:5/d"),
        ("postgresql+psycopg://u@h:5/d", "postgresql+psycopg://u@h:5/d"),
    ],
)
def test_async_url_picks_async_driver(url: str, expected: str) -> None:
    assert async_url(url).render_as_string(hide_password=False) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite+aiosqlite:///var/x.db", "sqlite:///var/x.db"),
        ("postgresql://u@h:5/d", "postgresql+psycopg://u@h:5/d"),
    ],
)
def test_sync_url_picks_sync_driver(url: str, expected: str) -> None:
    assert sync_url(url).render_as_string(hide_password=False) == expected


def test_sync_url_rejects_other_databases() -> None:
    with pytest.raises(ValueError):
        sync_url("mysql://u@h/d")


def test_async_database_runs_function_in_transaction(database_url: str) -> None:
    record = new_response()

    async def scenario() -> object:
        database = AsyncDatabase(database_url)
        try:
            await database.run(insert_response, record)
            return await database.run(get_response, record.id)
        finally:
            await database.dispose()

    assert asyncio.run(scenario()) == Database(database_url).run(get_response, record.id)


def test_session_rolls_back_when_block_raises(db: Database) -> None:
    record = new_response()

    with pytest.raises(RuntimeError), db.session() as session:
        insert_response(session, record)
        raise RuntimeError("abort")

    assert db.run(get_response, record.id) is None


def test_sqlite_connections_use_wal_and_foreign_keys(tmp_path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'nested' / 'x.db'}")
    try:
        with database.engine.connect() as connection:
            journal = connection.execute(text("PRAGMA journal_mode")).scalar()
            foreign_keys = connection.execute(text("PRAGMA foreign_keys")).scalar()
    finally:
        database.dispose()

    assert (journal, foreign_keys) == ("wal", 1)


def test_database_keeps_pool_size_connections_open_between_transactions(database_url: str) -> None:
    database = Database(database_url, pool_size=8)
    try:
        opened = connects_in_two_rounds(database, 8)
    finally:
        database.dispose()

    assert opened == 8


def test_open_pool_opens_every_connection_the_pool_keeps(database_url: str) -> None:
    database = Database(database_url, pool_size=6)
    try:
        with counted_connects(database.engine) as opened:
            database.open_pool()
            at_start = len(opened)
            hold_transactions(database, 6)
    finally:
        database.dispose()

    assert (at_start, len(opened)) == (6, 6)


def test_database_reopens_connections_beyond_sqlalchemys_default_five(database_url: str) -> None:
    # What pool_size is for: without it, every connection past the fifth is closed when returned.
    database = Database(database_url)
    try:
        opened = connects_in_two_rounds(database, 8)
    finally:
        database.dispose()

    assert opened == 8 + 3


def test_async_database_keeps_pool_size_connections_open_between_sessions(database_url: str) -> None:
    async def scenario() -> int:
        database = AsyncDatabase(database_url, pool_size=8)
        try:
            return await async_connects_in_two_rounds(database, 8)
        finally:
            await database.dispose()

    assert asyncio.run(scenario()) == 8


def test_async_database_keeps_pool_size_connections_open_for_sqlite_transactions(tmp_path) -> None:
    # On SQLite the API's transactions run in pool threads, on the sync engine: sized alike.
    async def scenario() -> Database:
        database = AsyncDatabase(f"sqlite:///{tmp_path / 'x.db'}", pool_size=8)
        await database.dispose()
        return database._threaded  # type: ignore[return-value]

    threaded = asyncio.run(scenario())
    try:
        opened = connects_in_two_rounds(threaded, 8)
    finally:
        threaded.dispose()

    assert opened == 8


def test_in_memory_sqlite_databases_take_a_pool_size() -> None:
    # Their single connection has nothing to size: the option is left out, not refused.
    async def scenario() -> object:
        database = AsyncDatabase("sqlite://", pool_size=8)
        try:
            async with database.session() as session:
                return (await session.execute(text("SELECT 1"))).scalar()
        finally:
            await database.dispose()

    sync = Database("sqlite://", pool_size=8)
    try:
        assert sync.run(lambda session: session.execute(text("SELECT 1")).scalar()) == 1
    finally:
        sync.dispose()
    assert asyncio.run(scenario()) == 1


def _prepared_after_repeats(db: Database) -> int:
    """Statements prepared on one connection that ran the same query 10 times."""
    with db.engine.connect() as connection:
        for _ in range(10):
            connection.execute(text("SELECT 1 WHERE 1 = :x"), {"x": 1})
        return connection.execute(text("SELECT count(*) FROM pg_prepared_statements")).scalar_one()


@pytest.mark.postgres
def test_database_without_prepared_statements_prepares_none_for_pgbouncer(postgres_url: str) -> None:
    """Behind a PgBouncer pooling transactions, a statement psycopg prepared on one server connection is
    run on another ("prepared statement "_pg3_0" does not exist": creates answered 500)."""
    prepared, unprepared = Database(postgres_url), Database(postgres_url, prepared_statements=False)
    try:
        assert _prepared_after_repeats(prepared) > 0  # psycopg's default: prepared after 5 runs
        assert _prepared_after_repeats(unprepared) == 0
    finally:
        prepared.dispose()
        unprepared.dispose()


@pytest.mark.postgres
def test_async_database_without_prepared_statements_prepares_none_for_pgbouncer(postgres_url: str) -> None:
    async def count() -> int:
        db = AsyncDatabase(postgres_url, prepared_statements=False)
        try:
            async with db.engine.connect() as connection:
                for _ in range(10):
                    await connection.execute(text("SELECT 1 WHERE 1 = :x"), {"x": 1})
                return (await connection.execute(text("SELECT count(*) FROM pg_prepared_statements"))).scalar_one()
        finally:
            await db.dispose()

    assert asyncio.run(count()) == 0


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # PostgreSQL's failover
def test_database_reconnects_after_write_refused_as_read_only(database_url: str) -> None:
    """After a failover the pool's connections lead to the demoted primary, read-only from then on (here:
    the kept connection made read-only; new ones are not): the refusal drops them, the retry connects anew."""
    db = Database(database_url, pool_size=1)
    try:
        with db.engine.connect() as connection:  # the pool's one kept connection
            connection.execute(text("SET SESSION default_transaction_read_only = on"))
            connection.commit()
        with pytest.raises(DBAPIError) as refused:
            db.run(insert_response, new_response())
        assert refused_read_only(refused.value) and refused.value.connection_invalidated
        db.run(insert_response, new_response())  # on a new connection
    finally:
        db.dispose()


@pytest.mark.postgres
def test_database_gives_up_a_postgresql_server_that_never_answers(postgres_url: str) -> None:
    """A blackholed link or a load balancer whose backend is gone accepts and answers nothing: the connect
    waited for good (a worker's task thread, an API request, their pool slots with it)."""
    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody ever answers
    port = silent.getsockname()[1]
    database = Database(make_url(postgres_url).set(port=port), pool_size=1)
    done: list[BaseException] = []

    def connect() -> None:
        try:
            database.run(lambda session: session.execute(text("SELECT 1")))
        except BaseException as exc:  # noqa: BLE001  (what it raised is the assertion's)
            done.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(30)
    try:
        assert done, "the connect still waits after 30 s"
        assert isinstance(done[0], OperationalError) and unreachable(done[0])
        assert time.monotonic() - started < 20
    finally:
        silent.close()
        database.dispose()


@pytest.mark.postgres
def test_database_keeps_a_urls_own_keepalive_settings(postgres_url: str) -> None:
    database = Database(make_url(postgres_url).update_query_dict({"keepalives_idle": "60"}))
    try:
        with database.engine.connect() as connection:
            parameters = connection.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
        assert parameters["keepalives_idle"] == "60"
        assert parameters["tcp_user_timeout"] == str(PG_SILENT_PEER_GUARDS["tcp_user_timeout"])
    finally:
        database.dispose()


def test_refused_write_names_sqlite_disk_full(tmp_path: Path) -> None:
    """SQLITE_FULL ("database or disk is full"), met by a write on a real file held to its pages."""
    db = full_database(tmp_path / "full.db")
    try:
        with pytest.raises(OperationalError) as refused:
            fill(db)
        assert refused_write(refused.value) == "disk full"
    finally:
        db.dispose()


def test_refused_write_names_sqlite_read_only_file(tmp_path: Path) -> None:
    """SQLITE_READONLY ("attempt to write a readonly database"): the file opened read-only, as SQLite opens
    one whose file or filesystem refuses writing."""
    path = tmp_path / "ro.db"
    with sqlite3.connect(path) as writable:
        writable.execute("CREATE TABLE t (x)")
    read_only = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.OperationalError) as refused:
            read_only.execute("INSERT INTO t VALUES (1)")
        assert refused_write(refused.value) == "read-only"
    finally:
        read_only.close()


def test_refused_write_is_none_for_missing_table(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with pytest.raises(OperationalError) as failed:
            db.run(lambda session: session.execute(text("INSERT INTO nowhere VALUES (1)")))
        assert refused_write(failed.value) is None
    finally:
        db.dispose()
