"""A cancel asked of every worker (a client's ``POST .../cancel`` or DELETE in the API; a Celery
``revoke --terminate`` in a worker): the Redis commands both send.

The flag (read by a worker that starts or takes the response over later) and the open-streams listing
(should the end marker not reach Redis, the reaper ends the stream: ``workers/unclosed.py``) go first, in
one round trip; the PUBLISH that running workers listen to only once they are written: a full Redis
refuses SET but not PUBLISH, and a running response was cancelled while its client was told 503,
nothing changed."""

from __future__ import annotations

from typing import Any

from oss_responses import redis_keys


def flag_commands(response_id: str, ttl_seconds: int) -> list[tuple[Any, ...]]:
    return [
        ("SET", redis_keys.cancel(response_id), "1", "EX", ttl_seconds),
        ("SADD", redis_keys.OPEN_STREAMS, response_id),
    ]
