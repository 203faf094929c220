"""The worker's context: what ``start_worker`` builds for the task threads to share."""

from __future__ import annotations

from support.db_connections import counted_connects, hold_transactions

from oss_responses.config import Settings
from oss_responses.workers.context import WorkerContext, database_connections


def test_worker_keeps_a_database_connection_open_for_every_celery_thread(
    worker: WorkerContext, settings: Settings
) -> None:
    threads = database_connections(settings)  # its task threads, the reaper's and the webhook sweeper's
    assert threads > settings.worker_concurrency
    hold_transactions(worker.db, threads)

    with counted_connects(worker.db.engine) as reopened:
        hold_transactions(worker.db, threads)

    assert reopened == []
