"""The worker's context: what ``start_worker`` builds for the task threads to share."""

from __future__ import annotations

import asyncio

import pytest
import redis as redis_lib
from support.db_connections import connects_in_two_rounds

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.workers.context import READY_TTL_SECONDS, WorkerContext
from oss_responses.workers.testing import local_worker


def test_worker_starts_with_its_database_pool_open(worker: WorkerContext, settings: Settings) -> None:
    assert connects_in_two_rounds(worker.db, settings.database_pool_size) == 0


def test_worker_announces_its_model_context_while_up(settings: Settings, redis: redis_lib.Redis) -> None:
    with local_worker(settings.model_copy(update={"scripted_context_tokens": 800})) as ctx:
        assert redis.get(redis_keys.model_context(ctx.settings.worker_model)) == b"800"
        assert 0 < redis.ttl(redis_keys.model_context(ctx.settings.worker_model)) <= READY_TTL_SECONDS


def test_worker_whose_engine_has_no_context_announces_none(worker: WorkerContext, redis: redis_lib.Redis) -> None:
    assert redis.exists(redis_keys.worker_ready(worker.worker_id))
    assert not redis.exists(redis_keys.model_context(worker.settings.worker_model))


def test_keep_ready_goes_on_announcing_after_a_redis_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that lived through a Redis restart stayed unready for good: the refresh task had died with
    the first failed refresh."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from oss_responses.workers import context

    calls: list[int] = []

    async def announce(_client: object, _announced: dict[str, str]) -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RedisConnectionError("Connection refused")

    monkeypatch.setattr(context, "_announce", announce)
    monkeypatch.setattr(context, "READY_REFRESH_SECONDS", 0.01)

    async def scenario() -> None:
        task = asyncio.create_task(context._keep_ready(None, {}))  # type: ignore[arg-type]
        while len(calls) < 3 and not task.done():
            await asyncio.sleep(0.01)
        assert not task.done()
        task.cancel()

    asyncio.run(scenario())
    assert len(calls) >= 3
