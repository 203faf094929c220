"""The worker's context: what ``start_worker`` builds for the task threads to share."""

from __future__ import annotations

from support.db_connections import counted_connects, hold_transactions

from oss_responses.config import Settings
from oss_responses.workers.context import WorkerContext


def test_worker_starts_with_a_database_connection_open_for_every_celery_thread(
    worker: WorkerContext, settings: Settings
) -> None:
    threads = settings.worker_database_connections  # its task threads, the reaper's and the webhook sweeper's
    assert threads > settings.worker_concurrency

    with counted_connects(worker.db.engine) as opened:
        hold_transactions(worker.db, threads)
        hold_transactions(worker.db, threads)

    assert opened == []
