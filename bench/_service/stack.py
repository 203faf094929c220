"""The whole service on loopback for a bench: redis-server, a migrated database (a SQLite file, or a
throw-away PostgreSQL cluster started here), ONE API process and (switchable) one Celery worker
process, through the tests' own starters (tests/support/processes.py, tests/support/servers.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import redis as redis_lib
from _common import process_tree
from support import REPO
from support.processes import (
    ready_workers,
    service_env,
    start_api_process,
    stop_process,
    wait_until,
)
from support.servers import PostgresCluster, RedisServer, start_postgres, start_redis

from oss_responses.config import Settings
from oss_responses.storage import migrate

SERVED = "gpt-oss-20b"  # a worker listens on its queue
UNSERVED = "gpt-oss-120b"  # configured, but no worker: its responses stay queued


@dataclass
class Stack:
    directory: Path
    redis: RedisServer
    settings: Settings
    api: subprocess.Popen[bytes]
    host: str
    port: int
    postgres: PostgresCluster | None = None
    api_env: dict[str, str] | None = None  # the API's environment, when not service_env(settings)
    worker: subprocess.Popen[bytes] | None = None
    trace_file: Path | None = None
    _workers_started: int = field(default=0)

    def start_worker(self, concurrency: int, step_interval: float = 0.0, traced: bool = True) -> None:
        """The worker for SERVED, scripted at full speed (or stepped), its events traced (or not: the
        production worker, without the trace's own per-event cost)."""
        self.stop_worker()
        self._workers_started += 1
        self.trace_file = self.directory / f"trace-{self._workers_started}.txt"
        env = service_env(
            self.settings,
            OSS_RESPONSES_WORKER_CONCURRENCY=str(concurrency),
            OSS_RESPONSES_SCRIPTED_STEP_INTERVAL_SECONDS=str(step_interval),
            OSS_RESPONSES_SCRIPTED_TOKENS_PER_SECOND="0",
            BENCH_TRACE_FILE=str(self.trace_file),
        )
        client = redis_lib.Redis.from_url(self.settings.redis_url)
        before = ready_workers(client)
        with (self.directory / f"worker-{self._workers_started}.log").open("wb") as log:
            self.worker = subprocess.Popen(
                [sys.executable, "-m", "bench._service.traced_worker" if traced else "oss_responses.workers",
                 "--loglevel=WARNING"],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        wait_until(lambda: bool(ready_workers(client) - before), self.worker, "the worker")
        client.close()

    def stop_worker(self) -> None:
        if self.worker is not None:
            stop_process(self.worker)
            self.worker = None

    def restart_api(self) -> None:
        """A fresh API process (on a new port) in place of the running one, its settings unchanged."""
        stop_process(self.api)
        self.api, base_url = start_api_process(self.settings, self.directory / "api-restarted.log", self.api_env,
                                               fork=False)
        self.host, port = base_url.removeprefix("http://").split(":")
        self.port = int(port)

    def stop(self) -> None:
        self.stop_worker()
        try:
            stop_process(self.api)
        finally:
            self.redis.stop()
            if self.postgres is not None:
                self.postgres.stop()
            shutil.rmtree(self.directory, ignore_errors=True)


def start_stack(database: str = "sqlite", api_processes: int = 1, tool_servers: dict[str, str] | None = None) -> Stack:
    """``database``: "sqlite" (a file in the stack's folder) or "postgresql" (its own cluster);
    ``api_processes``: the API's (``OSS_RESPONSES_API_PROCESSES``), all up when this returns;
    ``tool_servers``: the configured MCP servers (``OSS_RESPONSES_TOOL_SERVERS``), label → URL."""
    directory = Path(tempfile.mkdtemp(prefix="oss-bench-service-"))
    redis = start_redis()
    postgres = None
    try:
        if database == "postgresql":
            postgres = start_postgres()
            database_url = postgres.create_database("bench")
        else:
            database_url = f"sqlite:///{directory / 'oss-responses.db'}"
        migrate(database_url)
        settings = Settings(database_url=database_url, redis_url=redis.url, models=[SERVED, UNSERVED],
                            api_processes=api_processes, tool_servers=tool_servers or {})
        # Several API processes' metrics: each process has built its app once its live gauge is there
        # (the supervisor, which imports the app's modules too, has one more: idle).
        metrics = directory / "api-metrics"
        metrics.mkdir()
        env = service_env(settings, PROMETHEUS_MULTIPROC_DIR=str(metrics)) if api_processes > 1 else None
        # executed, not forked: its CPU and memory are measured
        api, base_url = start_api_process(settings, directory / "api.log", env, fork=False)
        if api_processes > 1:
            wait_until(lambda: len(list(metrics.glob("gauge_live*.db"))) == api_processes + 1, api,
                       "the API processes")
    except BaseException:
        redis.stop()
        if postgres is not None:
            postgres.stop()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    host, port = base_url.removeprefix("http://").split(":")
    return Stack(directory=directory, redis=redis, settings=settings, api=api, host=host, port=int(port),
                 postgres=postgres, api_env=env)


def api_pids(pid: int) -> list[int]:
    """The API's processes: ``pid`` and, with several API processes, the ones its supervisor spawned."""
    return process_tree(pid)

