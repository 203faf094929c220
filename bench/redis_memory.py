"""Redis memory per response, while it runs and once it ended: the real worker path, in process.

A redis-server (started here), a migrated SQLite file, one in-process worker (engine loop, scripted
engine at ``--rate`` tokens/s per response, the same runner as the Celery task): ``--responses``
requests of ``tokens N`` accepted as the API accepts them and run concurrently. While they run, the
keys of every response (all of ``redis_keys``' per-response keys) are sampled with ``MEMORY USAGE ...
SAMPLES 0``; once all ended, measured again, with the size of their logs in SQL. The headline is the
last line.

    PYTHONPATH=.:tests python bench/redis_memory.py [--responses 20] [--tokens 256] [--rate 200]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import redis as redis_lib
from _common import percentile
from sqlalchemy import select
from sqlalchemy.orm import Session
from support.servers import start_redis
from support.workers import accept, worker_settings

from oss_responses import redis_keys
from oss_responses.storage import Database, EventLogRow, migrate
from oss_responses.workers.testing import local_worker, run_response_now

PER_RESPONSE_KEYS = (redis_keys.events, redis_keys.lease, redis_keys.cancel, redis_keys.journal,
                     redis_keys.takeovers, redis_keys.resume)


def response_bytes(redis: redis_lib.Redis, response_id: str) -> dict[str, int]:
    """MEMORY USAGE of each existing key of one response, by key kind."""
    sizes = {}
    for key_of in PER_RESPONSE_KEYS:
        usage = redis.memory_usage(key_of(response_id), samples=0)
        if usage:
            sizes[key_of.__name__] = usage
    return sizes


def archived_sizes(session: Session) -> list[tuple[int, int]]:
    """(stored bytes, frame bytes) of every archived event log."""
    return [(len(row.frames), len(zlib.decompress(row.frames))) for row in session.scalars(select(EventLogRow))]


def sample_running(redis: redis_lib.Redis, ids: list[str], done: threading.Event) -> list[dict[str, int]]:
    """Per-response key sizes of the responses still running, every 50 ms until ``done``."""
    samples = []
    while not done.wait(0.05):
        for response_id in ids:
            entries = redis.xrevrange(redis_keys.events(response_id), count=1)
            if entries and b"end" not in entries[0][1]:
                samples.append(response_bytes(redis, response_id))
    return samples


def describe(label: str, samples: list[dict[str, int]]) -> int:
    totals = [sum(s.values()) for s in samples]
    kinds = sorted({kind for s in samples for kind in s})
    parts = ", ".join(f"{kind} {percentile([s.get(kind, 0) for s in samples], 0.5):,.0f}" for kind in kinds)
    print(f"{label}: median {percentile(totals, 0.5):,.0f} B, max {max(totals):,} B per response ({parts})")
    return int(percentile(totals, 0.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--responses", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rate", type=float, default=200.0, help="tokens/s per response (scripted engine)")
    args = parser.parse_args()
    server = start_redis()
    redis = redis_lib.Redis.from_url(server.url)
    try:
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{folder}/bench.db"
            migrate(url)
            db = Database(url)
            settings = worker_settings(url, server.url, scripted_tokens_per_second=args.rate, lease_seconds=30.0)
            with local_worker(settings, with_mcp=False) as worker:
                ids = [accept(db, redis, settings, input=f"tokens {args.tokens}", background=True)
                       for _ in range(args.responses)]
                done = threading.Event()
                with ThreadPoolExecutor(args.responses + 1) as pool:
                    sampler = pool.submit(sample_running, redis, ids, done)
                    t0 = time.monotonic()
                    outcomes = list(pool.map(lambda rid: run_response_now(rid, worker=worker), ids))
                    done.set()
                    running = sampler.result()
                wall = time.monotonic() - t0
            sql_sizes = db.run(archived_sizes)
            db.dispose()
        assert set(outcomes) == {"completed"}, outcomes
        print(f"{args.responses} responses of 'tokens {args.tokens}' at {args.rate:g} tokens/s each, "
              f"{wall:.1f} s; redis-server {redis.info('server')['redis_version']}")
        describe("running (sampled every 50 ms)", running)
        finished = describe("ended", [response_bytes(redis, rid) for rid in ids])
        if sql_sizes:
            stored, raw = (percentile(column, 0.5) for column in zip(*sql_sizes, strict=True))
            print(f"in SQL (event_logs), per finished response: median {stored:,.0f} B compressed, "
                  f"{raw:,.0f} B of frames")
        print(f"redis_bytes_per_finished_response: {finished} bytes")
    finally:
        redis.close()
        server.stop()


if __name__ == "__main__":
    main()
