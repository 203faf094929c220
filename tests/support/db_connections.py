"""How many connections a database handle opens: transactions held open at once, and a count of the
driver connections made meanwhile (SQLAlchemy's ``connect`` event fires once per new one)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session

from oss_responses.storage import AsyncDatabase, Database


@contextmanager
def counted_connects(engine: Engine) -> Iterator[list[Any]]:
    """A list that gets an entry each time ``engine`` opens a driver connection."""
    opened: list[Any] = []

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        opened.append(dbapi_connection)

    event.listen(engine, "connect", on_connect)
    try:
        yield opened
    finally:
        event.remove(engine, "connect", on_connect)


def hold_transactions(database: Database, count: int) -> None:
    """``count`` transactions open at the same time, each in its own thread (as task threads use it)."""
    together = threading.Barrier(count, timeout=30)

    def hold(session: Session) -> None:
        session.execute(text("SELECT 1"))
        together.wait()  # every transaction has its connection before any gives it back

    with ThreadPoolExecutor(count) as pool:
        for done in [pool.submit(database.run, hold) for _ in range(count)]:
            done.result()


def connects_in_two_rounds(database: Database, count: int) -> int:
    """Driver connections ``database`` opens for two rounds of ``count`` transactions held at once."""
    with counted_connects(database.engine) as opened:
        hold_transactions(database, count)
        hold_transactions(database, count)
    return len(opened)


async def hold_async_sessions(database: AsyncDatabase, count: int) -> None:
    """``count`` sessions of the async engine open at the same time (concurrent requests)."""
    opened = 0
    all_open = asyncio.Event()

    async def hold() -> None:
        nonlocal opened
        async with database.session() as session:
            await session.execute(text("SELECT 1"))
            opened += 1
            if opened == count:
                all_open.set()
            await asyncio.wait_for(all_open.wait(), 30)

    await asyncio.gather(*(hold() for _ in range(count)))


async def async_connects_in_two_rounds(database: AsyncDatabase, count: int) -> int:
    """Driver connections ``database`` opens for two rounds of ``count`` sessions held at once."""
    with counted_connects(database.engine.sync_engine) as opened:
        await hold_async_sessions(database, count)
        await hold_async_sessions(database, count)
    return len(opened)
