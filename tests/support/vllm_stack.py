"""The service on the real vLLM engine for tests: a Celery worker process with ``engine=vllm`` on the
tiny model (forcing on), an API process, the demo calculator as code_interpreter; built on the
service's process starters (:mod:`support.processes`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

import redis as redis_lib

from oss_responses.config import Settings
from support import REPO
from support.mcp import CALCULATOR, mcp_server
from support.processes import ready_workers as ready_worker_keys
from support.processes import service_env, stop_process
from support.tiny_engine import MAX_MODEL_LEN, TEST_ENGINE_ARGS

# A hang, not a slow start: importing vLLM and starting the engine took 25-35 s alone; the group of
# test_frontends (then five processes importing vLLM; four since the model runs in the engine core)
# took 163 s on 2026-12-03, at the suite's busy start.
WORKER_START_TIMEOUT_S = 300.0
CONCURRENCY = 8


def vllm_worker_env(settings: Settings, model: Path, **extra: str) -> dict[str, str]:
    """The environment of a vLLM worker on the tiny model (a test's settings leave the scripted engine)."""
    env = {
        "OSS_RESPONSES_ENGINE": "vllm",
        "OSS_RESPONSES_VLLM_MODEL": str(model),
        "OSS_RESPONSES_VLLM_DTYPE": "bfloat16",
        "OSS_RESPONSES_VLLM_MAX_MODEL_LEN": str(MAX_MODEL_LEN),
        "OSS_RESPONSES_VLLM_ENGINE_ARGS": json.dumps(TEST_ENGINE_ARGS),
        "OSS_RESPONSES_WORKER_CONCURRENCY": str(CONCURRENCY),
    }
    return service_env(settings, **(env | extra))


def ready_workers(redis_url: str) -> set[bytes]:
    client = redis_lib.Redis.from_url(redis_url)
    try:
        return ready_worker_keys(client)
    finally:
        client.close()


def launch_worker(
    env: dict[str, str], log_path: Path, module: str = "oss_responses.workers"
) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen([sys.executable, "-m", module, "--loglevel=WARNING"], cwd=REPO,
                                env=env, stdout=log, stderr=subprocess.STDOUT)


def run_worker_to_exit(env: dict[str, str], log_path: Path, timeout: float = 60.0) -> tuple[int, str]:
    """A worker command that should not start: its exit status and its output."""
    process = launch_worker(env, log_path)
    try:
        returncode = process.wait(timeout=timeout)
    finally:
        stop_process(process)
    return returncode, log_path.read_text(errors="replace")


def start_vllm_worker(
    settings: Settings, env: dict[str, str], log_path: Path, module: str = "oss_responses.workers", *,
    workers: int = 1,
) -> subprocess.Popen[bytes]:
    """A vLLM worker process (``python -m module``); returns once it reports ready in Redis (``workers``
    new readiness keys: a worker command with several front ends sets one per front end)."""
    before = ready_workers(settings.redis_url)
    process = launch_worker(env, log_path, module)
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    while len(ready_workers(settings.redis_url) - before) < workers:
        if process.poll() is not None:
            raise RuntimeError(f"the vLLM worker exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            stop_process(process)
            raise TimeoutError(f"the vLLM worker was not ready within {WORKER_START_TIMEOUT_S}s")
        time.sleep(0.1)
    return process


def calculator_server() -> AbstractContextManager[str]:
    """The demo calculator MCP server (Streamable HTTP) on a free loopback port; its URL."""
    return mcp_server(*CALCULATOR)
