"""The worker's context: what ``start_worker`` builds for the task threads to share."""

from __future__ import annotations

from support.db_connections import connects_in_two_rounds

from oss_responses.config import Settings
from oss_responses.workers.context import WorkerContext


def test_worker_starts_with_its_database_pool_open(worker: WorkerContext, settings: Settings) -> None:
    assert connects_in_two_rounds(worker.db, settings.database_pool_size) == 0
