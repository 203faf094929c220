"""What the workers announce in Redis while their engines are up (``workers/context.py`` sets it, with a
TTL they keep refreshing), read back: how many workers are ready for each model, and which run a release
older than this one (the schema revision it was built for; none before the field was announced)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import redis as redis_lib

from oss_responses import redis_keys
from oss_responses.redis_refusals import wrong_type


def announcements(client: redis_lib.Redis) -> list[dict[str, Any]]:
    """Every ready worker's announcement ({} for one this build cannot read). A key of that name holding another
    type (by hand, another application, a bug) is no worker's: skipped, where its WRONGTYPE failed whoever read
    them (every reaper pass's housekeeping, the doctor) for as long as it stayed; one expired since the scan too."""
    keys = list(client.scan_iter(redis_keys.worker_ready("*")))
    if not keys:
        return []
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.get(key)
        values = pipe.execute(raise_on_error=False)
    for value in values:
        if isinstance(value, Exception) and not wrong_type(value):
            raise value
    return [_parsed(value) for value in values if isinstance(value, bytes | str)]


def ready_workers(client: redis_lib.Redis) -> Counter[str | None]:
    """Ready workers per model (None: an announcement this build cannot read)."""
    return per_model(announcements(client))


def per_model(announced: list[dict[str, Any]]) -> Counter[str | None]:
    return Counter(_model_of(worker) for worker in announced)


def older_release(announced: dict[str, Any], newest: str) -> bool:
    """Was the worker built for an older schema than ``newest`` (or before workers announced theirs)?"""
    schema = announced.get("schema")
    return not isinstance(schema, str) or schema < newest


def _parsed(announced: bytes | str | None) -> dict[str, Any]:
    try:
        parsed = json.loads(announced or b"{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _model_of(announced: dict[str, Any]) -> str | None:
    model = announced.get("model")
    return str(model) if model is not None else None
