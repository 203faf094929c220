"""How far a host's clock is from Redis's, the one clock every process of the service reaches.

Hosts stamp what others compare: the API a response's ``created_at``, the worker that ends it its
``completed_at`` and the webhook it signs (a receiver refuses a signature more than five minutes off
its own clock). Workers measure their distance at each readiness refresh and announce it; the doctor
measures its own host's and warns of every one over :data:`SKEW_WARN_SECONDS`.
"""

from __future__ import annotations

import time

import redis as redis_lib
from redis import asyncio as redis_asyncio

# NTP keeps hosts within milliseconds; seconds apart is a host without it.
SKEW_WARN_SECONDS = 2.0
# A reading is off by up to half its round trip. One that took longer than this (Redis stopped or stalled a
# while, a busy loop) is taken again, up to READ_ATTEMPTS readings in all: a worker's refresh whose TIME Redis
# answered 4-5 s late, after a SIGSTOP, read its own clock 2-2.5 s ahead and warned "run NTP".
MAX_ROUND_TRIP_SECONDS = 0.5
READ_ATTEMPTS = 3


def skew(before: float, after: float, server_time: tuple[int, int]) -> float:
    """This host's clock less Redis's (seconds), ``server_time`` (TIME's seconds and microseconds) read
    between ``before`` and ``after`` by this host's clock."""
    seconds, micros = server_time
    return round((before + after) / 2 - (seconds + micros / 1e6), 3)


async def redis_skew(client: redis_asyncio.Redis) -> float:
    for attempt in range(1, READ_ATTEMPTS + 1):
        before = time.time()
        server_time = await client.time()
        after = time.time()
        if _settled(before, after, attempt):
            break
    return skew(before, after, server_time)


def redis_skew_sync(client: redis_lib.Redis) -> float:
    for attempt in range(1, READ_ATTEMPTS + 1):
        before = time.time()
        server_time = client.time()
        after = time.time()
        if _settled(before, after, attempt):
            break
    return skew(before, after, server_time)


def _settled(before: float, after: float, attempt: int) -> bool:
    """A reading to keep: its round trip short enough, or the last one allowed."""
    return after - before <= MAX_ROUND_TRIP_SECONDS or attempt == READ_ATTEMPTS


def skewed(seconds: float) -> bool:
    return abs(seconds) > SKEW_WARN_SECONDS
