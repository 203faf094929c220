"""Recovery as a client sees it: the time from a worker's loss to the next delta of its response.

Real processes on loopback: a redis-server, a migrated SQLite file, two Celery workers
(``python -m oss_responses.workers``, scripted engine at 50 tokens/s per response), default lease and
reaper settings unless given. Each run starts a long response, waits until it streams, then signals
the worker holding its lease:
  - SIGKILL: another worker takes it over once the lease expires (about lease_seconds);
  - SIGTERM: the worker hands it off at once and exits; the time to exit is printed too;
  - a Redis restart: redis-server (AOF, fsync always, as docker-compose runs it) killed and started again
    ``--redis-down-seconds`` later; timed from its restart. The worker's writes fail meanwhile and it leaves
    the response to a takeover, which starts once Redis answers (its lease released by the reaper's next
    pass, the task taken by a consumer that tries its broker every second).
A fresh worker replaces the signalled one before the next run. Every run checks that the stream is
contiguous (no gap, no duplicate) once it ends.

Usage: PYTHONPATH=.:tests python bench/recovery.py [--runs 5] [--lease-seconds 15] [--reaper-interval 1]
    [--redis-down-seconds 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import redis as redis_lib
from _common import percentile
from support import MODEL
from support.processes import WorkerProcess, ready_workers
from support.servers import RedisServer, start_redis
from support.streams import events_of
from support.workers import accept, worker_settings

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.storage import Database, migrate
from oss_responses.workers.celery_app import enqueue, make_celery

TOKENS_PER_SECOND = 50.0


def start_worker(settings: Settings, name: str, logs: Path, client: redis_lib.Redis) -> WorkerProcess:
    known = ready_workers(client)
    worker = WorkerProcess(settings, name, logs, fork=False)  # a deploy starts a fresh process
    worker.wait_ready(client, known)
    return worker


def deltas(client: redis_lib.Redis, response_id: str) -> list[dict]:  # type: ignore[type-arg]
    return [e for e in events_of(client, response_id) if e["type"] == "response.output_text.delta"]


def wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.005)


def restart_redis(server: RedisServer, down_seconds: float) -> None:
    server.kill()
    time.sleep(down_seconds)
    server.restart()


def one_run(
    settings: Settings, db: Database, client: redis_lib.Redis, workers: dict[int, WorkerProcess],
    fault: signal.Signals | Callable[[], None],
) -> tuple[float, float | None]:
    """(seconds from the signal, or Redis's restart, to the next delta; seconds for the signalled worker to exit)."""
    response_id = accept(db, client, settings, input="tokens 3000", background=True)
    enqueue(make_celery(settings), settings, response_id, MODEL)
    wait_for(lambda: len(deltas(client, response_id)) >= 20, 30, "the response did not stream")
    holder = client.get(redis_keys.lease(response_id)).decode()  # type: ignore[union-attr]
    pid = int(holder.split(":")[1])
    seen = len(deltas(client, response_id))
    if isinstance(fault, signal.Signals):
        signalled = time.monotonic()
        os.kill(pid, fault)
    else:
        fault()
        signalled = time.monotonic()
        seen = len(deltas(client, response_id))  # what reached Redis before it went away
    wait_for(lambda: len(deltas(client, response_id)) > seen + 1, 120, "no delta after the fault")
    recovery = time.monotonic() - signalled
    exited = None
    if fault == signal.SIGTERM:
        workers[pid].process.wait(timeout=30)
        exited = time.monotonic() - signalled
    client.set(redis_keys.cancel(response_id), "1")
    client.publish(redis_keys.CANCEL_CHANNEL, response_id)
    wait_for(lambda: client.xrevrange(redis_keys.events(response_id), count=1)[0][1].get(b"end") is not None, 30,
             "the cancelled response did not end")
    numbers = [e["sequence_number"] for e in events_of(client, response_id)]
    assert numbers == list(range(len(numbers))), "the stream has a gap or a duplicate"
    return recovery, exited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lease-seconds", type=float, default=Settings.model_fields["lease_seconds"].default)
    parser.add_argument("--reaper-interval", type=float,
                        default=Settings.model_fields["reaper_interval_seconds"].default)
    parser.add_argument("--redis-down-seconds", type=float, default=3.0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="oss-recovery-"))
    redis_server = start_redis(appendonly=True)
    settings = worker_settings(
        f"sqlite:///{folder / 'bench.db'}", redis_server.url, scripted_tokens_per_second=TOKENS_PER_SECOND,
        lease_seconds=args.lease_seconds, reaper_interval_seconds=args.reaper_interval,
    )
    migrate(settings.database_url)
    db = Database(settings.database_url)
    client = redis_lib.Redis.from_url(settings.redis_url)
    workers: dict[int, WorkerProcess] = {}
    try:
        for n in range(2):
            worker = start_worker(settings, f"w{n}", folder, client)
            workers[worker.process.pid] = worker
        print(f"lease_seconds={args.lease_seconds} reaper_interval_seconds={args.reaper_interval} runs={args.runs}")
        results: dict[str, list[tuple[float, float | None]]] = {}
        faults: dict[str, signal.Signals | Callable[[], None]] = {
            "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL,
            "REDIS_RESTART": partial(restart_redis, redis_server, args.redis_down_seconds),
        }
        for name, fault in faults.items():
            results[name] = []
            for run in range(args.runs):
                results[name].append(one_run(settings, db, client, workers, fault))
                for pid in [pid for pid, w in workers.items() if w.process.poll() is not None]:
                    workers.pop(pid)
                while len(workers) < 2:
                    worker = start_worker(settings, f"w{name}{run}", folder, client)
                    workers[worker.process.pid] = worker
        for name, runs in results.items():
            recoveries = [r for r, _ in runs]
            print(f"{name.lower()}_next_delta_p50: {percentile(recoveries, 0.5):.2f} s")
            print(f"{name.lower()}_next_delta_p99: {percentile(recoveries, 0.99):.2f} s (max of {len(runs)})")
            exits = [e for _, e in runs if e is not None]
            if exits:
                print(f"{name.lower()}_worker_exit_p99: {percentile(exits, 0.99):.2f} s")
        sigkill = [r for r, _ in results["SIGKILL"]]
        print(f"redis_restart_next_delta_median: {percentile([r for r, _ in results['REDIS_RESTART']], 0.5):.2f} s")
        print(f"sigterm_next_delta_median: {percentile([r for r, _ in results['SIGTERM']], 0.5):.2f} s")
        print(f"sigkill_next_delta_median: {percentile(sigkill, 0.5):.2f} s")
    finally:
        for worker in workers.values():
            worker.stop()
        client.close()
        db.dispose()
        redis_server.stop()


if __name__ == "__main__":
    main()
