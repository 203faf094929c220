"""Whether every model the API serves has a worker: a model without one queues its responses forever
(background ones stay ``queued``, a foreground request waits until its client gives up)."""

from __future__ import annotations

from collections.abc import Iterator

import redis as redis_lib

from oss_responses.announcements import ready_workers
from oss_responses.config import Settings
from oss_responses.doctor.report import CheckResult
from oss_responses.doctor.stores import TIMEOUT_SECONDS


def check_workers(settings: Settings) -> Iterator[CheckResult]:
    client = redis_lib.Redis.from_url(settings.redis_url, socket_timeout=TIMEOUT_SECONDS,
                                      socket_connect_timeout=TIMEOUT_SECONDS)
    try:
        ready = ready_workers(client)
    except redis_lib.RedisError:  # the redis check FAILs for it; this line says what is not known
        yield CheckResult("workers", "warn", "not checked: workers announce themselves in Redis, which does not answer")
        return
    finally:
        client.close()
    for model in settings.models:
        if ready[model]:
            yield CheckResult("workers", "ok", f"{model}: {ready[model]} worker(s) ready")
        else:
            yield CheckResult("workers", "warn", f"{model}: no worker ready; its responses wait in the queue "
                                                 f"{settings.queue_for(model)} until one starts")

