"""This host's clock against Redis's (``oss_responses/clocks.py``)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

from redis.asyncio import Redis
from support.servers import start_redis

from oss_responses.clocks import redis_skew, skewed


def test_redis_skew_answered_late_by_stopped_redis_reads_again() -> None:
    # A TIME that a stopped Redis answered 4 s late (SIGCONT) put this host's clock 2 s ahead of Redis's: a
    # worker's readiness refresh warned "run NTP" after a Redis freeze, and again "within 2 s" at the next one.
    server = start_redis()

    async def measured() -> float:
        client = Redis.from_url(server.url, socket_timeout=10)
        try:
            await client.ping()
            os.kill(server.process.pid, signal.SIGSTOP)
            threading.Timer(4.5, os.kill, (server.process.pid, signal.SIGCONT)).start()
            return await redis_skew(client)
        finally:
            await client.aclose()

    try:
        assert not skewed(asyncio.run(measured()))
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        server.stop()
