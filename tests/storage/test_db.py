from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from support.rows import new_response

from oss_responses.storage import (
    AsyncDatabase,
    Database,
    async_url,
    get_response,
    insert_response,
    sync_url,
)


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
