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


def skew(before: float, after: float, server_time: tuple[int, int]) -> float:
    """This host's clock less Redis's (seconds), ``server_time`` (TIME's seconds and microseconds) read
    between ``before`` and ``after`` by this host's clock."""
    seconds, micros = server_time
    return round((before + after) / 2 - (seconds + micros / 1e6), 3)


async def redis_skew(client: redis_asyncio.Redis) -> float:
    before = time.time()
    server_time = await client.time()
    return skew(before, time.time(), server_time)


def redis_skew_sync(client: redis_lib.Redis) -> float:
    before = time.time()
    server_time = client.time()
    return skew(before, time.time(), server_time)


def skewed(seconds: float) -> bool:
    return abs(seconds) > SKEW_WARN_SECONDS
