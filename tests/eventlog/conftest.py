"""Fixtures of the event-log tests: async Redis clients, a started EventHub, event factories."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import redis as redis_lib
from openai.types.responses import ResponseTextDeltaEvent
from redis.asyncio import Redis

from oss_responses.eventlog import EventHub

MakeEvents = Callable[[range], list[ResponseTextDeltaEvent]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def aredis(redis_url: str, redis: redis_lib.Redis) -> AsyncIterator[Redis]:
    """An asyncio client on the test server (``redis`` flushed the database first)."""
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def hub(redis_url: str, redis: redis_lib.Redis) -> AsyncIterator[EventHub]:
    hub = EventHub(redis_url, block_ms=10_000)
    await hub.start()
    yield hub
    await hub.stop()


@pytest.fixture
def make_events() -> MakeEvents:
    """Text delta events whose delta names their sequence number."""

    def make(numbers: range) -> list[ResponseTextDeltaEvent]:
        return [
            ResponseTextDeltaEvent(
                type="response.output_text.delta",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                delta=f"d{n}",
                logprobs=[],
                sequence_number=n,
            )
            for n in numbers
        ]

    return make
