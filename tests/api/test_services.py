"""What the API builds at start-up for its routes to share (``api/app.py``)."""

from __future__ import annotations

import asyncio

from support import MODEL
from support.db_connections import counted_connects, hold_async_sessions

from oss_responses.api.app import _open_services
from oss_responses.config import Settings


def test_open_services_keeps_database_pool_size_connections_open(database_url: str, redis_url: str) -> None:
    settings = Settings(database_url=database_url, redis_url=redis_url, models=[MODEL], database_pool_size=12)

    async def reopened() -> list[object]:
        async with _open_services(settings) as services:
            await hold_async_sessions(services.db, 12)
            with counted_connects(services.db.engine.sync_engine) as opened:
                await hold_async_sessions(services.db, 12)
            return opened

    assert asyncio.run(reopened()) == []
