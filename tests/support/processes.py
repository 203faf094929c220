"""The service's own processes for tests and benches: API replicas (``python -m oss_responses.api``) and
Celery workers (``python -m oss_responses.workers``), each configured through its environment from a
test's ``Settings`` (:func:`service_env`), each on a free port.

Forked from a server that imported the commands once (:mod:`support.forked`) unless ``fork=False``: the
tests of the commands themselves and the benches, which measure a start or a process's own costs, pass it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import redis as redis_lib
from pydantic import SecretStr

from oss_responses import redis_keys
from oss_responses.config import Settings
from support import REPO, TIKTOKEN_DIR
from support.forked import ForkedProcess, can_fork, lower_open_files
from support.servers import START_TIMEOUT_S, free_port

ServiceProcess = subprocess.Popen[bytes] | ForkedProcess

STOP_TIMEOUT_S = 15.0
_PREFIX = Settings.model_config["env_prefix"]


def service_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment that makes a subprocess's ``get_settings()`` equal these settings.

    Ours without its own ``OSS_RESPONSES_*`` variables, then every field the settings were given
    (``model_fields_set``), then ``extra``. A test's settings name no vocabulary folder and no worker
    model: the checkout's ``var/tiktoken`` and the first served model stand in.
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith(_PREFIX)}
    env |= {f"{_PREFIX}WORKER_MODEL": settings.models[0], f"{_PREFIX}TIKTOKEN_DIR": str(TIKTOKEN_DIR)}
    given = settings.model_dump(include=settings.model_fields_set)
    env |= {f"{_PREFIX}{name.upper()}": _env_value(value) for name, value in given.items() if value is not None}
    return env | extra


def _env_value(value: Any) -> str:
    """A field as pydantic-settings reads it back: strings as they are, anything else as JSON."""
    if isinstance(value, str | Path):
        return str(value)
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return json.dumps(value, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} has no environment form")


def launch(
    module: str, argv: list[str], env: dict[str, str], log_path: Path, *, open_files: int | None = None,
    fork: bool = True,
) -> ServiceProcess:
    """``python -m module *argv`` with ``env`` in the checkout, its output to ``log_path``; forked if it can be."""
    if fork and can_fork(module, env):
        return ForkedProcess(("-m", module), argv, env, log_path, open_files)
    with log_path.open("wb") as log:
        return subprocess.Popen([sys.executable, "-m", module, *argv], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=soft_open_files(open_files))


def stop_process(process: ServiceProcess) -> None:
    """SIGTERM (a graceful shutdown), SIGKILL if it is still there after ``STOP_TIMEOUT_S``."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until(
    check: Callable[[], bool], process: ServiceProcess, what: str, timeout: float = START_TIMEOUT_S
) -> None:
    """Until ``check()`` holds; raises if ``process`` exits first or ``timeout`` passes (then it is stopped:
    the test that started it never gets it to stop)."""
    deadline = time.monotonic() + timeout
    while not check():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        if time.monotonic() > deadline:
            stop_process(process)
            raise TimeoutError(f"{what} did not start within {timeout}s")
        time.sleep(0.05)


def soft_open_files(limit: int | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` starting a process with a soft open-files limit of ``limit`` (None: as ours)."""
    return None if limit is None else partial(lower_open_files, limit)


def open_files_limit(pid: int) -> int:
    """The soft open-files limit process ``pid`` runs with."""
    with open(f"/proc/{pid}/limits") as limits:
        line = next(line for line in limits if line.startswith("Max open files"))
    return int(line.split()[3])


def start_api_process(
    settings: Settings, log_path: Path, env: dict[str, str] | None = None, *, open_files: int | None = None,
    fork: bool = True,
) -> tuple[ServiceProcess, str]:
    """``python -m oss_responses.api`` on a free port; returns once /healthz answers.

    ``env`` defaults to :func:`service_env` of ``settings``; the port and host are added to it.
    ``open_files``: the soft open-files limit it starts with. Several API processes
    (``OSS_RESPONSES_API_PROCESSES``) are always executed: uvicorn's supervisor spawns each of them afresh
    anyway, and the tests that start them are about that supervision.
    """
    port = free_port()
    env = (service_env(settings) if env is None else env) | {
        f"{_PREFIX}API_PORT": str(port),
        f"{_PREFIX}API_HOST": "127.0.0.1",
    }
    one_process = env.get(f"{_PREFIX}API_PROCESSES", "1") == "1"
    process = launch("oss_responses.api", [], env, log_path, open_files=open_files, fork=fork and one_process)
    base_url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx2.get(f"{base_url}/healthz", timeout=1).status_code == 200
        except httpx2.HTTPError:
            return False

    wait_until(healthy, process, "the API process")
    return process, base_url


def ready_workers(redis: redis_lib.Redis) -> set[bytes]:
    """The readiness keys of the workers up now (each worker sets its own once its engine started)."""
    return set(redis.scan_iter(redis_keys.worker_ready("*")))


def start_worker_process(
    settings: Settings, log_path: Path, env: dict[str, str] | None = None, *, open_files: int | None = None,
    fork: bool = True,
) -> ServiceProcess:
    """``python -m oss_responses.workers`` (scripted engine); returns once it reports ready in Redis.

    ``env`` defaults to :func:`service_env` of ``settings``; ``open_files`` as for :func:`start_api_process`.
    """
    client = redis_lib.Redis.from_url(settings.redis_url)
    before = ready_workers(client)
    process = launch("oss_responses.workers", ["--loglevel=WARNING"], service_env(settings) if env is None else env,
                     log_path, open_files=open_files, fork=fork)
    try:
        wait_until(lambda: bool(ready_workers(client) - before), process, "the worker")
    finally:
        client.close()
    return process


class WorkerProcess:
    """A named Celery worker process (scripted engine, 4 threads) logging to ``log_dir/<name>.log``."""

    def __init__(self, settings: Settings, name: str, log_dir: Path, *, fork: bool = True) -> None:
        self.log = log_dir / f"{name}.log"
        env = service_env(settings, OSS_RESPONSES_WORKER_CONCURRENCY="4")
        self.process = launch("oss_responses.workers", ["-n", f"{name}@%h", "--loglevel", "INFO"], env, self.log,
                              fork=fork)

    def wait_ready(self, redis: redis_lib.Redis, known: set[bytes]) -> None:
        """Until a readiness key not in ``known`` appears (set once this worker's engine is up)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited {self.process.returncode}: {self.log.read_text()[-2000:]}")
            if ready_workers(redis) - known:
                return
            time.sleep(0.05)
        raise TimeoutError(f"worker not ready: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        stop_process(self.process)
