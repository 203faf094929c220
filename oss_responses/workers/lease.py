"""A running response's lease: which worker runs it, so a redelivered task cannot run it twice.

``SET lease:{id} worker NX PX`` takes it; a keep-alive task renews it every third of its TTL while
the response runs; it is released (and renewed) only while it is still ours, by a Lua compare-and-
delete / compare-and-expire (``owned_keys.py``), so a worker that lost its lease can never drop another worker's.
A lease that expires (its worker died) lets the reaper fail the response.

A lease whose release an outage refused (Redis away when its run let go: the run that lost a write to
Redis, above all) would hold its response for the rest of its TTL once Redis answers: the takeover waited
for it to lapse, so a 3 s Redis restart stalled such responses for up to ``lease_seconds`` (15 s by
default; 58 s after the restart at the tests' 60, measured). ``UnreleasedLeases`` keeps them, and the
worker's reaper releases them on its first pass that reaches Redis.

The keep-alive stops once it is no longer the lease's keeper, not on its cancel alone (see
``oss_responses.stopping``): a cancel that arrives while a renewal is in flight can go unseen, and
the keeper then found its own released lease gone and reported it lost (in a fault test, an ERROR
and ``on_lost`` after the response had completed).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections.abc import Callable

from redis import Redis as SyncRedis
from redis.asyncio import Redis

from oss_responses import redis_keys
from oss_responses.owned_keys import HAND_ON_UNLESS_TAKEN, RELEASE_IF_OWNED, RENEW_IF_OWNED
from oss_responses.workers.outage import warn_failed

log = logging.getLogger(__name__)



def run_owner(worker_id: str) -> str:
    """What one run of a response writes in its lease: the worker, and a token of the run's own, so that
    a run of this worker that lost the lease (it stalled past it) is not taken for its holder."""
    return f"{worker_id}/{secrets.token_hex(4)}"


class Lease:
    def __init__(self, redis: Redis, response_id: str, owner: str, seconds: float) -> None:
        self.redis = redis
        self.key = redis_keys.lease(response_id)
        self.owner = owner
        self.ttl_ms = max(1, int(seconds * 1000))
        self.lost = False
        self.on_lost: Callable[[], None] | None = None  # called on the loop when the lease is lost
        self._keeper: asyncio.Task[None] | None = None

    async def acquire(self) -> bool:
        return bool(await self.redis.set(self.key, self.owner, nx=True, px=self.ttl_ms))

    async def renew(self) -> bool:
        return bool(await self.redis.eval(RENEW_IF_OWNED, 1, self.key, self.owner, self.ttl_ms))

    async def release(self) -> bool:
        self.stop_renewing()
        return bool(await self.redis.eval(RELEASE_IF_OWNED, 1, self.key, self.owner))

    def release_from_thread(self, redis: SyncRedis) -> bool:
        """Released on a synchronous client, by a task thread whose engine loop is gone (its keeper with it)."""
        self.on_lost = None
        return bool(redis.eval(RELEASE_IF_OWNED, 1, self.key, self.owner))

    async def hand_on(self, mark_key: str, mark: str, seconds: int) -> bool:
        """Released with ``mark`` set on ``mark_key`` (the response's resume mark), in one step, unless another
        run holds the lease: then False, and nothing changed."""
        self.stop_renewing()
        return bool(await self.redis.eval(HAND_ON_UNLESS_TAKEN, 2, self.key, mark_key, self.owner, mark, seconds))

    def hand_on_from_thread(self, redis: SyncRedis, mark_key: str, mark: str, seconds: int) -> bool:
        """``hand_on`` on a synchronous client, by a task thread whose engine loop is gone."""
        self.on_lost = None
        return bool(redis.eval(HAND_ON_UNLESS_TAKEN, 2, self.key, mark_key, self.owner, mark, seconds))

    async def holder(self) -> str | None:
        value = await self.redis.get(self.key)
        return value.decode() if isinstance(value, bytes) else value

    def keep_alive(self) -> None:
        """Renew every third of the TTL until released; ``on_lost`` runs if it was taken away."""
        if self._keeper is None:
            self._keeper = asyncio.get_running_loop().create_task(self._renew_forever())

    def stop_renewing(self) -> None:
        """No renewal and no ``on_lost`` from now on (the task itself may finish a renewal in flight)."""
        if self._keeper is not None:
            self._keeper.cancel()
            self._keeper = None

    def _still_keeper(self) -> bool:
        """The running task is still this lease's keeper: not released (nor stopped) meanwhile."""
        return self._keeper is asyncio.current_task()

    async def _renew_forever(self) -> None:
        interval = self.ttl_ms / 3000
        while True:
            await asyncio.sleep(interval)
            if not self._still_keeper():
                return
            try:
                still_ours = await self.renew()
            except Exception as exc:  # a Redis hiccup: try again next time, the TTL still has two thirds left
                warn_failed(log, exc, "renewing %s failed", self.key)
                continue
            if not self._still_keeper():  # released while the renewal was on its way
                return
            if not still_ours:
                log.error("lease %s lost (expired or taken over)", self.key)
                self.lost = True
                if self.on_lost is not None:
                    self.on_lost()
                return


class UnreleasedLeases:
    """The leases this worker's runs let go of while Redis was away, with the time each lapses by: released
    again by the reaper's thread once Redis answers (compare-and-delete: one another run took since stays)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # task threads add, the reaper's thread releases
        self._leases: dict[tuple[str, str], float] = {}  # (key, owner) -> when it lapses anyway

    def add(self, lease: Lease) -> None:
        with self._lock:
            self._leases[(lease.key, lease.owner)] = self._clock() + lease.ttl_ms / 1000

    def __len__(self) -> int:
        return len(self._leases)

    def release(self, redis: SyncRedis) -> int:
        """Releases the kept leases that have not lapsed (one round trip), forgets them all; how many it
        released. An outage raises, and they are kept for the next try."""
        now = self._clock()
        with self._lock:
            self._leases = {lease: lapses for lease, lapses in self._leases.items() if lapses > now}
            kept = list(self._leases)
        if not kept:
            return 0
        with redis.pipeline(transaction=False) as pipe:
            for key, owner in kept:
                pipe.eval(RELEASE_IF_OWNED, 1, key, owner)
            released = pipe.execute()
        with self._lock:
            for lease in kept:
                self._leases.pop(lease, None)
        return sum(1 for answer in released if answer)
