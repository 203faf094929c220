"""A cancel asked of every worker (a client's ``POST .../cancel`` or DELETE in the API; a Celery
``revoke --terminate`` in a worker; a worker's reaper for a foreground response whose API process is gone,
``relays.py``): the Redis commands they send.

The flag (read by a worker that starts or takes the response over later) and the open-streams listing
(should the end marker not reach Redis, the reaper ends the stream: ``workers/unclosed.py``) go first, in
one round trip; the PUBLISH that running workers listen to only once they are written: a full Redis
refuses SET but not PUBLISH, and a running response was cancelled while its client was told 503,
nothing changed.

The listing is a safety net, not the cancel: refused because the open streams' key holds something other than
a set (by hand, another application, a bug), it does not stop the cancel (``check_flagged``), which answered
500 until a reaper's pass replaced the key, and whose PUBLISH never reached a running response's worker."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis import Redis

from oss_responses import redis_keys
from oss_responses.redis_refusals import wrong_type

log = logging.getLogger(__name__)


def flag_commands(response_id: str, ttl_seconds: int) -> list[tuple[Any, ...]]:
    return [
        ("SET", redis_keys.cancel(response_id), "1", "EX", ttl_seconds),
        ("SADD", redis_keys.OPEN_STREAMS, response_id),
    ]


def check_flagged(replies: Sequence[Any], response_id: str) -> None:
    """The replies to ``flag_commands`` (sent with errors returned, not raised): a refused flag is raised; a
    listing refused for the open streams' key holding another type is logged, and the cancel goes on."""
    flag, listing = replies
    if isinstance(flag, Exception):
        raise flag
    if isinstance(listing, Exception):
        note_unlisted(listing, response_id)


def cancel_everywhere(redis: Redis, response_id: str, ttl_seconds: int) -> None:
    """The whole cancel from a thread of a worker (a revoke that terminates; the reaper, for a response whose
    API process is gone): flagged and listed in one round trip, then published."""
    with redis.pipeline(transaction=False) as pipe:
        for command in flag_commands(response_id, ttl_seconds):
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        check_flagged(pipe.execute(raise_on_error=False), response_id)
    redis.publish(redis_keys.CANCEL_CHANNEL, response_id)  # once flagged (see above)


def note_unlisted(refused: Exception, response_id: str) -> None:
    """A listing of the response's stream among the open streams that Redis refused: raised, unless the key holds
    another type (by hand, another application, a bug; the reaper's next pass replaces it), which is logged."""
    if not wrong_type(refused):
        raise refused
    log.warning("%s could not be listed among the open streams: %s holds something other than a set (overwritten "
                "by hand, another application or a bug; the reaper's next pass replaces it)", response_id,
                redis_keys.OPEN_STREAMS)
