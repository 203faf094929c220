"""``python -m oss_responses.workers [celery worker options]``: a worker for ``worker_model``'s queue.

A thin wrapper around ``celery worker``: threads pool, concurrency and queue from the settings
(``OSS_RESPONSES_*``); it consumes the model's queue and the webhooks queue; extra arguments go to celery
(e.g. ``-n w1@%h``). Logging is the service's (``OSS_RESPONSES_LOG_FORMAT``/``_LOG_LEVEL``), not
celery's ``--loglevel``.

With the vLLM engine and ``OSS_RESPONSES_VLLM_FRONTENDS`` above 1 this process supervises one vLLM
engine core and that many such workers over it (``oss_responses.engine.frontends``). Each gets its own
Celery node name (the index joined to the name's first part: ``w1-0@%h``, ``w1-1@%h``; ``frontend-0@%h``
... without ``-n``) and, when ``OSS_RESPONSES_WORKER_METRICS_PORT`` is set, the port plus its index.
"""

from __future__ import annotations

from oss_responses.workers.command import main

if __name__ == "__main__":
    main()
