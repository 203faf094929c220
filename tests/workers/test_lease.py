"""Leases: one worker per response, renewed while it runs, released only by its holder."""

from __future__ import annotations

import asyncio
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis as redis_lib
import uvloop
from redis.asyncio import Redis
from support.async_redis import run_with_client
from support.servers import free_port
from support.streams import events_of
from support.workers import accept, worker_settings

from oss_responses import redis_keys
from oss_responses.storage import Database
from oss_responses.workers.lease import Lease, UnreleasedLeases
from oss_responses.workers.testing import local_worker, run_response_now


def test_acquire_lease_refused_while_another_holds_it(redis_url: str, redis: redis_lib.Redis) -> None:
    async def body(client):  # type: ignore[no-untyped-def]
        first, second = Lease(client, "r1", "w1", 5), Lease(client, "r1", "w2", 5)
        return await first.acquire(), await second.acquire(), await second.release(), await first.holder()

    assert run_with_client(redis_url, body) == (True, False, False, "w1")


def test_keep_alive_renews_lease_past_its_ttl(redis_url: str, redis: redis_lib.Redis) -> None:
    async def body(client):  # type: ignore[no-untyped-def]
        lease = Lease(client, "r1", "w1", 0.3)
        await lease.acquire()
        lease.keep_alive()
        await asyncio.sleep(0.9)
        holder = await lease.holder()
        await lease.release()
        return holder, await lease.holder()

    assert run_with_client(redis_url, body) == ("w1", None)


def test_keep_alive_reports_lost_lease(redis_url: str, redis: redis_lib.Redis) -> None:
    async def body(client):  # type: ignore[no-untyped-def]
        lease = Lease(client, "r1", "w1", 0.3)
        lost = asyncio.Event()
        lease.on_lost = lost.set
        await lease.acquire()
        await client.set(redis_keys.lease("r1"), "someone-else")
        lease.keep_alive()
        await asyncio.wait_for(lost.wait(), 2)
        return await client.get(redis_keys.lease("r1"))

    assert run_with_client(redis_url, body) == b"someone-else"


def test_two_runners_one_response_only_one_runs(database_url: str, redis_url: str, redis: redis_lib.Redis) -> None:
    settings = worker_settings(database_url, redis_url, scripted_tokens_per_second=200.0)
    db = Database(settings.database_url)
    response_id = accept(db, redis, settings, input="tokens 20")
    with local_worker(settings) as first, local_worker(settings) as second, ThreadPoolExecutor(2) as pool:
        outcomes = sorted(pool.map(lambda w: run_response_now(response_id, worker=w), (first, second)))
    assert outcomes[0] == "completed" and outcomes[1] in ("leased_elsewhere", "skipped")
    types = [e["type"] for e in events_of(redis, response_id)]
    assert types.count("response.in_progress") == 1 and types.count("response.completed") == 1
    db.dispose()


def test_runner_skips_response_leased_by_another_worker(
    database_url: str, redis_url: str, redis: redis_lib.Redis
) -> None:
    settings = worker_settings(database_url, redis_url)
    db = Database(settings.database_url)
    response_id = accept(db, redis, settings, input="hi")
    redis.set(redis_keys.lease(response_id), "other-worker", px=5000)
    with local_worker(settings) as worker:
        assert run_response_now(response_id, worker=worker) == "leased_elsewhere"
    assert redis.get(redis_keys.lease(response_id)) == b"other-worker"
    db.dispose()


def test_released_lease_never_reports_lost(redis_url: str, redis: redis_lib.Redis) -> None:
    """Released at random points of its keep-alive, renewals in flight included (on uvloop, whose
    cancels of a task inside a redis-py command go unseen most often), it never calls on_lost.

    A lease that truly expired first (the loop stalled past its 15 ms, as two busy cores can make it
    in CI) is rightly reported lost: its release finds nothing to delete, and it is not counted."""
    async def body() -> int:
        client = Redis.from_url(redis_url)
        lost: list[int] = []
        released_ours: set[int] = set()  # attempts whose release deleted a lease still theirs
        try:
            for attempt in range(60):
                lease = Lease(client, f"r{attempt}", "w1", 0.015)  # renewed every 5 ms
                await lease.acquire()
                lease.on_lost = lambda n=attempt: lost.append(n)
                lease.keep_alive()
                await asyncio.sleep(random.uniform(0.004, 0.03))
                if await lease.release():
                    released_ours.add(attempt)
                await asyncio.sleep(0.02)  # a keeper that went on would renew and report by now
        finally:
            await client.aclose()
        return len(released_ours.intersection(lost))

    assert uvloop.run(body()) == 0


def test_lease_whose_key_holds_something_else_is_lost_without_error(redis_url: str, redis: redis_lib.Redis) -> None:
    """Its key replaced by a list (by hand, another application, a bug): renewing it raised WRONGTYPE, a warning
    with a traceback each third of the lease, never reported lost; releasing it raised too."""
    async def body(client):  # type: ignore[no-untyped-def]
        lease = Lease(client, "r1", "w1", 0.3)
        await lease.acquire()
        lost = asyncio.Event()
        lease.on_lost = lost.set
        lease.keep_alive()
        redis.delete(lease.key)
        redis.rpush(lease.key, "not a lease")
        await asyncio.wait_for(lost.wait(), 2)
        return lease.lost, await lease.renew(), await lease.release(), lease.release_from_thread(redis)

    assert run_with_client(redis_url, body) == (True, False, False, False)
    assert redis.lrange(redis_keys.lease("r1"), 0, -1) == [b"not a lease"]  # left as it is


def _let_go(response_id: str, owner: str, seconds: float = 60.0) -> Lease:
    """A run's lease as its run holds it when it lets go (only its key, owner and TTL are used)."""
    return Lease(None, response_id, owner, seconds)  # type: ignore[arg-type]


def test_unreleased_leases_release_only_those_their_runs_still_hold(redis: redis_lib.Redis) -> None:
    unreleased = UnreleasedLeases()
    redis.set(redis_keys.lease("r1"), "w1/a", px=60_000)
    redis.set(redis_keys.lease("r2"), "w2/b", px=60_000)  # taken over since
    unreleased.add(_let_go("r1", "w1/a"))
    unreleased.add(_let_go("r2", "w1/c"))

    assert unreleased.release(redis) == 1
    assert redis.get(redis_keys.lease("r1")) is None
    assert redis.get(redis_keys.lease("r2")) == b"w2/b"
    assert len(unreleased) == 0


def test_unreleased_leases_forget_a_lease_once_it_has_lapsed(redis: redis_lib.Redis) -> None:
    now = [100.0]
    unreleased = UnreleasedLeases(clock=lambda: now[0])
    unreleased.add(_let_go("r1", "w1/a", seconds=15.0))
    redis.set(redis_keys.lease("r1"), "w1/a", px=60_000)  # as a next run of this worker, by chance, could hold it
    now[0] += 15.0

    assert unreleased.release(redis) == 0
    assert len(unreleased) == 0
    assert redis.get(redis_keys.lease("r1")) == b"w1/a"


def test_unreleased_leases_kept_while_redis_does_not_answer() -> None:
    unreleased = UnreleasedLeases()
    unreleased.add(_let_go("r1", "w1/a"))
    away = redis_lib.Redis(port=free_port(), socket_connect_timeout=1)

    with pytest.raises(redis_lib.ConnectionError):
        unreleased.release(away)
    assert len(unreleased) == 1
