"""Running the service for tests: the API under uvicorn in a thread of the test process, or API
replicas and a Celery worker as real processes; each on a free port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import redis as redis_lib
import uvicorn
from support.servers import free_port

from oss_responses import redis_keys
from oss_responses.api import create_app
from oss_responses.config import Settings
from oss_responses.storage import Database

MODEL = "gpt-oss-20b"
START_TIMEOUT_S = 20.0


@dataclass
class ApiServer:
    settings: Settings
    base_url: str
    db: Database


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets=None) -> None:  # type: ignore[no-untyped-def]
        await super().startup(sockets)
        self.ready.set()


def serve_in_thread(settings: Settings) -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    server = _Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    if not server.ready.wait(START_TIMEOUT_S) or not server.started:
        server.should_exit = True
        raise RuntimeError("the API did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)



# --- real processes: API replicas and a Celery worker (end-to-end tests) ----------------------------

REPO = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_S = 15.0


def service_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment that makes a subprocess's ``get_settings()`` equal these settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSS_RESPONSES_")}
    env |= {
        "OSS_RESPONSES_DATABASE_URL": settings.database_url,
        "OSS_RESPONSES_REDIS_URL": settings.redis_url,
        "OSS_RESPONSES_MODELS": json.dumps(settings.models),
        "OSS_RESPONSES_WORKER_MODEL": settings.models[0],
        "OSS_RESPONSES_ENGINE": "scripted",
        "OSS_RESPONSES_SCRIPTED_TOKENS_PER_SECOND": str(settings.scripted_tokens_per_second),
        "OSS_RESPONSES_TIKTOKEN_DIR": str(REPO / "var" / "tiktoken"),
    }
    if settings.encryption_keys:
        env["OSS_RESPONSES_ENCRYPTION_KEYS"] = json.dumps(settings.encryption_key_values)
    return env | extra


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until(check: Callable[[], bool], process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not check():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not start within {START_TIMEOUT_S}s")
        time.sleep(0.05)


def start_api_process(
    settings: Settings, log_path: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m oss_responses.api`` on a free port; returns once /healthz answers.

    ``env`` defaults to :func:`service_env` of ``settings``; the port and host are added to it.
    """
    port = free_port()
    env = (service_env(settings) if env is None else env) | {
        "OSS_RESPONSES_API_PORT": str(port),
        "OSS_RESPONSES_API_HOST": "127.0.0.1",
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "oss_responses.api"], cwd=REPO, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx2.get(f"{base_url}/healthz", timeout=1).status_code == 200
        except httpx2.HTTPError:
            return False

    wait_until(healthy, process, "the API process")
    return process, base_url


def start_worker_process(
    settings: Settings, log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m oss_responses.workers`` (scripted engine); returns once it reports ready in Redis.

    ``env`` defaults to :func:`service_env` of ``settings``.
    """
    client = redis_lib.Redis.from_url(settings.redis_url)
    before = set(client.scan_iter(redis_keys.worker_ready("*")))
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "oss_responses.workers", "--loglevel=WARNING"], cwd=REPO,
                                   env=service_env(settings) if env is None else env, stdout=log,
                                   stderr=subprocess.STDOUT)
    wait_until(lambda: bool(set(client.scan_iter(redis_keys.worker_ready("*"))) - before), process, "the worker")
    client.close()
    return process
