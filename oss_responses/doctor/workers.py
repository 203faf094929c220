"""Whether every model the API serves has a worker: a model without one queues its responses forever
(background ones stay ``queued``, a foreground request waits until its client gives up). And whether an
upgrade left workers on an older release than this one: README's upgrade order replaces every worker
(a worker from before migration 0009 ran a new API's conversation turns without their conversation)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis as redis_lib

from oss_responses.announcements import announcements, older_release, per_model
from oss_responses.config import Settings
from oss_responses.doctor.report import CheckResult
from oss_responses.doctor.stores import TIMEOUT_SECONDS
from oss_responses.storage.migrations import newest_revision


def check_workers(settings: Settings) -> Iterator[CheckResult]:
    client = redis_lib.Redis.from_url(settings.redis_url, socket_timeout=TIMEOUT_SECONDS,
                                      socket_connect_timeout=TIMEOUT_SECONDS)
    try:
        announced = announcements(client)
    except redis_lib.RedisError:  # the redis check FAILs for it; this line says what is not known
        yield CheckResult("workers", "warn", "not checked: workers announce themselves in Redis, which does not answer")
        return
    finally:
        client.close()
    ready = per_model(announced)
    for model in settings.models:
        if ready[model]:
            yield CheckResult("workers", "ok", f"{model}: {ready[model]} worker(s) ready")
        else:
            yield CheckResult("workers", "warn", f"{model}: no worker ready; its responses wait in the queue "
                                                 f"{settings.queue_for(model)} until one starts")
    yield from _older_releases(announced)


def _older_releases(announced: list[dict[str, Any]]) -> Iterator[CheckResult]:
    newest = newest_revision()
    older = [worker for worker in announced if older_release(worker, newest)]
    if older:
        schemas = sorted({str(worker.get("schema", "before 0012")) for worker in older})
        yield CheckResult("workers", "warn", f"{len(older)} ready worker(s) run an older release (schema "
                                             f"{', '.join(schemas)}; this one's is {newest}): replace them "
                                             "(README: upgrading a running deployment)")
