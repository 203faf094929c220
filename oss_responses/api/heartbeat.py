"""This API process's liveness in Redis: the key whose loss lets the workers cancel the foreground responses
it relayed (``relays.py``), should the process be killed rather than stopped.

One task per process renews ``redis_keys.api_alive(instance_id)`` every ``BEAT_SECONDS`` with a TTL of
``ALIVE_SECONDS``; a renewal that fails (Redis away) is tried again at the next beat, the outage told in a
few lines. A process that stops (its streams cut, its plain requests answered: their responses are
cancelled or ended by then) deletes the key as it closes.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from redis.asyncio import Redis

from oss_responses import redis_keys
from oss_responses.outage_log import OutageLog
from oss_responses.relays import ALIVE_SECONDS, BEAT_SECONDS
from oss_responses.stopping import cancel_and_wait

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self, redis: Redis) -> None:
        self.instance_id = uuid.uuid4().hex
        self._redis = redis
        self._key = redis_keys.api_alive(self.instance_id)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._outage = OutageLog(log, "API liveness: Redis")

    async def start(self) -> None:
        """The key set now (tried again by the task, should Redis not answer), then renewed until ``stop``."""
        await self._beat()
        self._task = asyncio.get_running_loop().create_task(self._beat_forever())

    async def stop(self) -> None:
        self._stopping = True
        await cancel_and_wait(self._task)
        try:
            await asyncio.wait_for(self._redis.delete(self._key), ALIVE_SECONDS)
        except Exception as exc:  # Redis away: the key expires by itself
            log.info("could not delete this API process's liveness key (%s)", type(exc).__name__)

    async def _beat_forever(self) -> None:
        while not self._stopping:
            await asyncio.sleep(BEAT_SECONDS)
            await self._beat()

    async def _beat(self) -> None:
        try:
            # Bounded: a Redis that stopped answering would hold the command, and the next beat, for good.
            await asyncio.wait_for(self._redis.set(self._key, "1", px=int(ALIVE_SECONDS * 1000)), ALIVE_SECONDS)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._outage.failed(exc)
        else:
            self._outage.answered()
