"""What the workers announce in Redis while their engines are up (``workers/context.py`` sets it, with a
TTL they keep refreshing), read back: how many workers are ready for each model."""

from __future__ import annotations

import json
from collections import Counter

import redis as redis_lib

from oss_responses import redis_keys


def ready_workers(client: redis_lib.Redis) -> Counter[str | None]:
    """Ready workers per model (None: an announcement this build cannot read)."""
    return Counter(_model_of(client.get(key)) for key in client.scan_iter(redis_keys.worker_ready("*")))


def _model_of(announced: bytes | str | None) -> str | None:
    try:
        return str(json.loads(announced or b"{}").get("model"))
    except (ValueError, AttributeError):
        return None
