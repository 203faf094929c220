"""The worker's context: what ``start_worker`` builds for the task threads to share."""

from __future__ import annotations

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
