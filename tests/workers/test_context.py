"""The worker's context: what ``start_worker`` builds for the task threads to share."""

from __future__ import annotations

from support.db_connections import counted_connects, hold_transactions

from oss_responses.config import Settings
from oss_responses.workers.context import WorkerContext


def test_worker_starts_with_its_database_pool_open(worker: WorkerContext, settings: Settings) -> None:
    with counted_connects(worker.db.engine) as opened:
        hold_transactions(worker.db, settings.database_pool_size)
        hold_transactions(worker.db, settings.database_pool_size)

    assert opened == []
