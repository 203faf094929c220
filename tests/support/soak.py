"""A randomized fault soak: responses of every kind run while processes are killed under them.

Real processes on loopback: a redis-server with AOF, a migrated SQLite file (or a PostgreSQL cluster
with ``--postgres``), the calculator and the misbehaving MCP servers, and two Celery workers
(``python -m oss_responses.workers``, scripted engine at a fixed speed). Each round starts one
response of each kind (text, an MCP calculator turn, a slow idempotent MCP call) and one more that is
cancelled at a random moment around the fault (as a client would, asking again while the API
answers 503), waits a random while, then injects one fault drawn at random:

- ``sigkill``: a random worker is SIGKILLed (its responses are taken over from their journals);
- ``sigterm``: a random worker gets SIGTERM (it hands its responses off and exits);
- ``sigstop``: a random worker is paused past its lease (SIGSTOP) while the other takes its responses
  over, resumed (SIGCONT), and a second later the other is SIGKILLed: the resumed one takes them over
  again, from journals its own late writes must not have reached;
- ``redis``: redis-server is SIGKILLed and started again a second later (AOF keeps everything);
- ``redis_freeze``: redis-server stops answering (SIGSTOP) past the event writer's reply limit, its connections
  open, then goes on (SIGCONT): each worker gives its writes up and its running responses go to takeovers,
  while the commands it had sent may still land once Redis reads them;
- ``postgres`` (with ``--postgres``): the database is restarted while responses finish.

A lost worker is replaced. Then every response must end ``completed`` with one contiguous stream,
one terminal event, the stream's final object equal to SQL's, and the same text as an uninterrupted
run of the same request; the cancelled one must end ``cancelled`` (its stream contiguous, with no
terminal event), or ``completed`` as the others if it ended first. Nothing may be left ``in_progress``.

``make soak`` runs 30 rounds (``tests/workers/soak.py``, which runs :func:`main`; by hand:
``PYTHONPATH=.:tests python tests/workers/soak.py --rounds N --seed S [--postgres]``).
The default test run runs a few rounds (``test_soak.py``).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis as redis_lib
from sqlalchemy.exc import DBAPIError

from oss_responses.config import Settings
from oss_responses.eventlog.writer import REPLY_SECONDS
from oss_responses.storage import Database, get_response, migrate
from oss_responses.workers.celery_app import enqueue, make_celery
from support import MODEL
from support.mcp import CALCULATOR, MISBEHAVING, mcp_server
from support.processes import WorkerProcess, ready_workers
from support.servers import PostgresCluster, RedisServer, start_postgres, start_redis
from support.streams import assert_cancelled_story, assert_one_story, story_text, wait_for_end
from support.workers import accept, cancel, worker_settings

KINDS: dict[str, dict[str, object]] = {
    "text": {"input": "tokens 120"},
    "tool": {"input": 'call calc.calculate {"expression": "6*7"}',
             "tools": [{"type": "mcp", "server_label": "calc", "require_approval": "never"}]},
    "slow tool": {"input": 'call slow.sleep {"seconds": 1}',
                  "tools": [{"type": "mcp", "server_label": "slow", "require_approval": "never"}]},
}
CANCELLED = {"input": "tokens 200"}  # ~3.3 s at the soak's pace: the cancel usually comes first
FAULTS = ("sigkill", "sigterm", "redis", "redis_freeze", "sigstop")
END_TIMEOUT_S = 90.0


@dataclass
class Soak:
    settings: Settings
    redis_server: RedisServer
    logs: Path
    postgres: PostgresCluster | None = None
    workers: list[WorkerProcess] = field(default_factory=list)
    started: int = 0

    @property
    def client(self) -> redis_lib.Redis:
        return redis_lib.Redis.from_url(self.settings.redis_url)

    def start_worker(self) -> None:
        client = self.client
        known = ready_workers(client)
        self.started += 1
        worker = WorkerProcess(self.settings, f"soak{self.started}", self.logs)
        worker.wait_ready(client, known)
        self.workers.append(worker)
        client.close()

    def replace_dead_workers(self) -> None:
        for worker in [w for w in self.workers if w.process.poll() is not None]:
            self.workers.remove(worker)
        while len(self.workers) < 2:
            self.start_worker()

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()


@contextmanager
def soak_stack(logs: Path, *, postgres: bool) -> Iterator[Soak]:
    with ExitStack() as stack:
        server = start_redis(appendonly=True)
        stack.callback(server.stop)
        cluster = None
        if postgres:
            cluster = start_postgres()
            stack.callback(cluster.stop)
            database_url = cluster.create_database("oss_soak")
        else:
            database_url = f"sqlite:///{logs / 'soak.db'}"
        migrate(database_url)
        calculator = stack.enter_context(mcp_server(*CALCULATOR))
        slow = stack.enter_context(mcp_server(*MISBEHAVING))
        settings = worker_settings(
            database_url, server.url, scripted_tokens_per_second=60.0, lease_seconds=1.5,
            reaper_interval_seconds=0.3, tool_servers={"calc": calculator, "slow": slow},
            idempotent_tools=["slow.sleep"],
        )
        soak = Soak(settings=settings, redis_server=server, logs=logs, postgres=cluster)
        stack.callback(soak.stop)
        soak.replace_dead_workers()
        yield soak


def start_response(soak: Soak, db: Database, client: redis_lib.Redis, kind: str) -> str:
    body = CANCELLED if kind == "cancelled" else KINDS[kind]
    response_id = accept(db, client, soak.settings, background=True, **body)  # type: ignore[arg-type]
    enqueue(make_celery(soak.settings), soak.settings, response_id, MODEL)
    return response_id


def cancel_later(soak: Soak, db: Database, client: redis_lib.Redis, response_id: str, delay: float) -> threading.Thread:
    """Cancel after ``delay``, asking again while Redis or the database does not answer (the API's 503)."""

    def run() -> None:
        time.sleep(delay)
        deadline = time.monotonic() + 30.0
        while True:
            try:
                cancel(db, client, soak.settings, response_id)
                return
            except (redis_lib.RedisError, DBAPIError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.25)

    thread = threading.Thread(target=run, name=f"cancel {response_id}")
    thread.start()
    return thread


def check_cancelled(db: Database, client: redis_lib.Redis, response_id: str) -> str:
    events = wait_for_end(client, response_id, timeout=END_TIMEOUT_S)
    record = db.run(get_response, response_id)
    if record is not None and record.status == "completed":  # it ended before the cancel came
        assert_one_story(events, db, response_id)
        return "completed"
    assert_cancelled_story(events, db, response_id)
    return "cancelled"


def inject(soak: Soak, fault: str, rng: random.Random) -> None:
    if fault == "sigkill":
        victim = rng.choice(soak.workers)
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait()
    elif fault == "sigterm":
        victim = rng.choice(soak.workers)
        victim.process.send_signal(signal.SIGTERM)
        victim.process.wait(timeout=15)
    elif fault == "sigstop":
        victim = rng.choice(soak.workers)
        os.kill(victim.process.pid, signal.SIGSTOP)
        time.sleep(soak.settings.lease_seconds + 1.0)
        os.kill(victim.process.pid, signal.SIGCONT)
        time.sleep(1.0)
        for other in [worker for worker in soak.workers if worker is not victim]:
            os.kill(other.process.pid, signal.SIGKILL)
            other.process.wait()
    elif fault == "redis":
        soak.redis_server.kill()
        time.sleep(1.0)
        soak.redis_server.restart()
    elif fault == "redis_freeze":
        os.kill(soak.redis_server.process.pid, signal.SIGSTOP)
        time.sleep(REPLY_SECONDS + 1.0)
        os.kill(soak.redis_server.process.pid, signal.SIGCONT)
    elif fault == "postgres":
        assert soak.postgres is not None
        soak.postgres.restart(down_seconds=2.0)
    soak.replace_dead_workers()


def expected_texts(soak: Soak, db: Database, client: redis_lib.Redis) -> dict[str, str]:
    """Each kind's answer when nothing goes wrong."""
    ids = {kind: start_response(soak, db, client, kind) for kind in KINDS}
    texts = {}
    for kind, response_id in ids.items():
        events = wait_for_end(client, response_id, timeout=END_TIMEOUT_S)
        assert_one_story(events, db, response_id)
        texts[kind] = story_text(events)
    return texts


def run_soak(  # type: ignore[no-untyped-def]
    rounds: int, seed: int, logs: Path, *, postgres: bool = False, schedule: list[str] | None = None, report=print
) -> dict[str, int]:
    """Runs the rounds (faults drawn at random, or ``schedule``'s in order); raises AssertionError on the
    first broken response. The faults injected, counted."""
    rng = random.Random(seed)
    cancel_rng = random.Random(seed + 1)  # drawn apart: a seed's faults stay those it drew before cancels were added
    faults = FAULTS + (("postgres",) if postgres else ())
    plan = schedule or [rng.choice(faults) for _ in range(rounds)]
    counts = dict.fromkeys(faults, 0)
    with soak_stack(logs, postgres=postgres) as soak:
        db = Database(soak.settings.database_url)
        client = soak.client
        expected = expected_texts(soak, db, client)
        for number, fault in enumerate(plan, start=1):
            delay = rng.uniform(0.2, 2.0)
            started = time.monotonic()
            ids = {kind: start_response(soak, db, client, kind) for kind in KINDS}
            cancelled = start_response(soak, db, client, "cancelled")
            canceller = cancel_later(soak, db, client, cancelled, cancel_rng.uniform(0.0, delay + 2.0))
            time.sleep(delay)
            inject(soak, fault, rng)
            counts[fault] += 1
            canceller.join()
            for kind, response_id in ids.items():
                events = wait_for_end(client, response_id, timeout=END_TIMEOUT_S)
                assert_one_story(events, db, response_id)
                assert story_text(events) == expected[kind], (kind, response_id, fault)
            ended = check_cancelled(db, client, cancelled)
            report(f"round {number}: {fault} after {delay:.2f}s; {len(ids)} responses completed intact, "
                   f"the one cancelled ended {ended}, in {time.monotonic() - started:.1f}s")
        client.close()
        db.dispose()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL (and its restarts) instead of SQLite")
    parser.add_argument("--only", choices=(*FAULTS, "postgres"), help="every round's fault (default: drawn at random)")
    args = parser.parse_args()
    print(f"soak: {args.rounds} rounds, seed {args.seed}")
    schedule = [args.only] * args.rounds if args.only else None
    with tempfile.TemporaryDirectory(prefix="oss-soak-") as logs:
        counts = run_soak(args.rounds, args.seed, Path(logs), postgres=args.postgres, schedule=schedule)
    print("faults injected:", ", ".join(f"{k} {v}" for k, v in counts.items()))
    print(f"soak_responses_intact: {args.rounds * (len(KINDS) + 1)} responses")


if __name__ == "__main__":
    main()
