"""``python -m oss_responses.workers [celery worker options]``: a worker for ``worker_model``'s queue.

A thin wrapper around ``celery worker``: threads pool, concurrency and queue from the settings
(``OSS_RESPONSES_*``); it consumes the model's queue and the webhooks queue; extra arguments go to celery
(e.g. ``-n w1@%h``). Logging is the service's (``OSS_RESPONSES_LOG_FORMAT``/``_LOG_LEVEL``), not
celery's ``--loglevel``.
"""

from __future__ import annotations

import sys

from oss_responses.config import get_settings
from oss_responses.workers.celery_app import make_celery
from oss_responses.workers.tasks import start_error


def main(argv: list[str] | None = None) -> None:
    settings = get_settings()
    app = make_celery(settings)
    args = [
        "worker",
        "--pool=threads",
        f"--concurrency={settings.worker_concurrency}",
        f"--queues={settings.queue_for(settings.worker_model)},{settings.webhook_queue}",
        "--loglevel=INFO",
        "--without-gossip",
        "--without-mingle",
        *(sys.argv[1:] if argv is None else argv),
    ]
    app.worker_main(args)
    if (error := start_error()) is not None:
        # Celery logs the failure but exits 0; a supervisor must see the worker did not serve.
        sys.exit(f"oss-responses worker not started: {error}")


if __name__ == "__main__":
    main()
