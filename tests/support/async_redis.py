"""An asyncio Redis client for one scenario: ``run_with_client(url, body)`` runs ``body(client)`` in a
fresh event loop and closes the client after."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as redis_asyncio


def run_with_client(redis_url: str, body: Callable[[redis_asyncio.Redis], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        client = redis_asyncio.Redis.from_url(redis_url)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())
