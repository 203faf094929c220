"""Which API process relays a foreground response to its client, and whether that process is still alive.

A foreground response (not background: a streamed create, a plain create waiting for its end, a WebSocket
create, a compaction) runs for the client of one API process. When that client leaves, the process cancels
it (``api/relay.py``, ``api/socket.py``, ``api/routes/responses.py``); told to stop, it cuts its streams,
which cancels them too. A process that is killed (SIGKILL, the OOM killer, its host lost) does neither: its
responses ran to their ends on the workers, for nobody, and each client's retry was a new response.

So each API process has an instance id and keeps ``redis_keys.api_alive(instance)`` set (``ALIVE_SECONDS``,
renewed every ``BEAT_SECONDS``: ``api/heartbeat.py``), and its accept of a foreground response records that
instance in ``redis_keys.relay(id)`` (deleted with the stream's end marker). The worker holding the reaper's
lock cancels a running response whose relay's key its passes have found missing for ``GONE_AFTER_SECONDS``
(``GoneRelays``), as the process would have on its client's disconnect: the flag and the PUBLISH of any
cancel. The wait lets a Redis that comes back without the key (it expired while Redis was away) have it
written again first. A worker about to start a queued response whose relay is gone cancels it instead
(``relay_gone``, ``workers/runner.py``).

A background response has no relay: no API process's death cancels it. A replica that resumes a foreground
stream (``GET ?stream=true``) does not become its relay: its creator's disconnect cancels it whoever else
follows it, and so does its creator's death.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from redis import Redis

from oss_responses import redis_keys

BEAT_SECONDS = 1.0  # how often an API process renews its liveness key
ALIVE_SECONDS = 5.0  # the key's TTL: a process whose loop stalls for less keeps its responses
GONE_AFTER_SECONDS = 3.0  # how long a relay's key is found missing before its responses are cancelled


def relay_command(response_id: str, instance_id: str, ttl_seconds: int) -> tuple[Any, ...]:
    """The accept's record of the API process that relays a foreground response."""
    return ("SET", redis_keys.relay(response_id), instance_id, "EX", ttl_seconds)


def as_text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


class GoneRelays:
    """The API instances a reaper found without their liveness key, and since when (its clock's time)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._missing_since: dict[str, float] = {}

    def gone(self, alive: Mapping[str, bool]) -> set[str]:
        """Of the instances looked at (``alive``: whether each one's key was found), those missing for
        ``GONE_AFTER_SECONDS``; an instance no longer looked at is forgotten."""
        now = self._clock()
        self._missing_since = {instance: self._missing_since.get(instance, now)
                               for instance, found in alive.items() if not found}
        return {instance for instance, since in self._missing_since.items() if now - since >= GONE_AFTER_SECONDS}


def alive_instances(redis: Redis, instances: Iterable[str]) -> dict[str, bool]:
    """Whether each instance's liveness key is set, in one round trip."""
    names = sorted(set(instances))
    if not names:
        return {}
    found = redis.mget([redis_keys.api_alive(name) for name in names])
    return {name: value is not None for name, value in zip(names, found, strict=True)}


def relay_gone(redis: Redis, instance_id: str, sleep: Callable[[float], None] = time.sleep) -> bool:
    """The relay of a response about to start is gone: its key missing, and still missing
    ``GONE_AFTER_SECONDS`` later (the reaper's wait, for the same reason). Waits only when it is missing."""
    key = redis_keys.api_alive(instance_id)
    if redis.exists(key):
        return False
    sleep(GONE_AFTER_SECONDS)
    return not redis.exists(key)
