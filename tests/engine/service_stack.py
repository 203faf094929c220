"""The service on the real vLLM engine for tests: a Celery worker process with ``engine=vllm`` on the
tiny model (forcing on), an API process, the demo calculator as code_interpreter; reusing the API
tests' process starters (tests/api/api_server.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

import redis as redis_lib

from api_server import REPO, service_env, start_api_process, stop_process
from tiny_engine import MAX_MODEL_LEN
from tool_fixtures import mcp_server

from oss_responses import redis_keys
from oss_responses.config import Settings

WORKER_START_TIMEOUT_S = 150.0  # importing vLLM and starting the engine: 25-35 s, more on a busy machine
CONCURRENCY = 8


def vllm_worker_env(settings: Settings, model: Path, **extra: str) -> dict[str, str]:
    """The environment of a vLLM worker on the tiny model (service_env pins the scripted engine)."""
    env = {
        "OSS_RESPONSES_ENGINE": "vllm",
        "OSS_RESPONSES_VLLM_MODEL": str(model),
        "OSS_RESPONSES_VLLM_DTYPE": "bfloat16",
        "OSS_RESPONSES_VLLM_MAX_MODEL_LEN": str(MAX_MODEL_LEN),
        "OSS_RESPONSES_VLLM_GPU_MEMORY_UTILIZATION": "0.3",
        "OSS_RESPONSES_VLLM_ENGINE_ARGS": json.dumps({"enforce_eager": True}),
        "OSS_RESPONSES_WORKER_CONCURRENCY": str(CONCURRENCY),
        "OSS_RESPONSES_TOOL_SERVERS": json.dumps(settings.tool_servers),
    }
    return service_env(settings, **(env | extra))


def start_api(settings: Settings, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m oss_responses.api`` with the tool servers configured; returns once /healthz answers."""
    env = service_env(settings, OSS_RESPONSES_TOOL_SERVERS=json.dumps(settings.tool_servers))
    return start_api_process(settings, log_path, env=env)


def ready_workers(redis_url: str) -> set[bytes]:
    client = redis_lib.Redis.from_url(redis_url)
    try:
        return set(client.scan_iter(redis_keys.worker_ready("*")))
    finally:
        client.close()


def launch_worker(env: dict[str, str], log_path: Path, module: str = "oss_responses.workers") -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen([sys.executable, "-m", module, "--loglevel=WARNING"], cwd=REPO,
                                env=env, stdout=log, stderr=subprocess.STDOUT)


def start_vllm_worker(
    settings: Settings, env: dict[str, str], log_path: Path, module: str = "oss_responses.workers"
) -> subprocess.Popen[bytes]:
    """A vLLM worker process (``python -m module``); returns once it reports ready in Redis."""
    before = ready_workers(settings.redis_url)
    process = launch_worker(env, log_path, module)
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    while not ready_workers(settings.redis_url) - before:
        if process.poll() is not None:
            raise RuntimeError(f"the vLLM worker exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            stop_process(process)
            raise TimeoutError(f"the vLLM worker was not ready within {WORKER_START_TIMEOUT_S}s")
        time.sleep(0.1)
    return process


def calculator_server() -> AbstractContextManager[str]:
    """The demo calculator MCP server (Streamable HTTP) on a free loopback port; its URL."""
    return mcp_server("-m", "oss_responses.tools.servers.calculator")


