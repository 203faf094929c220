"""``python -m oss_responses.api``: with ``OSS_RESPONSES_API_PROCESSES=2`` one port, two processes (uvicorn's
supervisor), their metrics in a folder of the run's own, a killed process replaced and forgotten; a
process restarted on a kept metrics folder; a low open-files limit raised."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import psutil
import pytest
from support import MODEL
from support.processes import open_files_limit, service_env, start_api_process, stop_process
from support.servers import free_port

from oss_responses.config import Settings

PROCESSES = 2


@dataclass
class ApiProcesses:
    supervisor: subprocess.Popen[bytes]
    base_url: str

    def children(self) -> list[psutil.Process]:
        """The serving processes (uvicorn spawns them through multiprocessing); a killed one not yet reaped
        is left out."""
        serving = []
        for child in psutil.Process(self.supervisor.pid).children():
            try:
                if "multiprocessing.spawn" in " ".join(child.cmdline()):
                    serving.append(child)
            except (psutil.ZombieProcess, psutil.NoSuchProcess):
                continue
        return serving

    def metrics_folder(self) -> Path:
        return Path(self.children()[0].environ()["PROMETHEUS_MULTIPROC_DIR"])


def eventually(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


@pytest.fixture
def serve(redis_url: str, tmp_path: Path) -> Iterator[Callable[[str], ApiProcesses]]:
    """Starts ``python -m oss_responses.api`` with two processes on a database; stops it afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def start(database_url: str) -> ApiProcesses:
        settings = Settings(database_url=database_url, redis_url=redis_url, models=[MODEL])
        env = service_env(settings, OSS_RESPONSES_API_PROCESSES=str(PROCESSES))
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        supervisor, base_url = start_api_process(settings, tmp_path / "api.log", env, fork=False)
        started.append(supervisor)
        processes = ApiProcesses(supervisor, base_url)
        eventually(lambda: len(processes.children()) == PROCESSES, "the API processes did not start")
        eventually(lambda: len(list(processes.metrics_folder().glob("gauge_live*.db"))) == PROCESSES,
                   "the API processes did not load their metrics")
        return processes

    yield start
    for supervisor in started:
        stop_process(supervisor)


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """Where the database makes no difference: SQLite only."""
    path = tmp_path / "oss-responses.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


def _create(base_url: str) -> str:
    # A new connection each time: either process may take it.
    created = httpx2.post(f"{base_url}/v1/responses", json={"model": MODEL, "input": "hi", "background": True},
                          timeout=10)
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


async def _create_async(http: httpx2.AsyncClient) -> str:
    created = await http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True})
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def _accepted(base_url: str) -> float:
    text = httpx2.get(f"{base_url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("oss_responses_accepted_total{"))


def test_serve_api_processes_share_one_port_and_their_metrics(
    serve: Callable[[str], ApiProcesses], database_url: str
) -> None:
    api_processes = serve(database_url)
    ids = [_create(api_processes.base_url) for _ in range(12)]
    for response_id in ids:  # stored by one process, read by whichever answers
        got = httpx2.get(f"{api_processes.base_url}/v1/responses/{response_id}", timeout=10)
        assert got.status_code == 200 and got.json()["status"] == "queued"
    counters = list(api_processes.metrics_folder().glob("counter_*.db"))
    assert len(counters) == PROCESSES
    assert _accepted(api_processes.base_url) == len(ids)


def test_restart_killed_api_process_and_forget_its_live_gauges(
    serve: Callable[[str], ApiProcesses], sqlite_url: str
) -> None:
    api_processes = serve(sqlite_url)
    folder = api_processes.metrics_folder()
    victim = api_processes.children()[0].pid
    os.kill(victim, signal.SIGKILL)

    def replaced() -> bool:
        pids = {child.pid for child in api_processes.children()}
        return len(pids) == PROCESSES and victim not in pids

    eventually(replaced, "the killed API process was not replaced")

    def live_gauges_of_live_processes_only() -> bool:
        # The new process writes its own live gauges while it starts, after uvicorn has forked it.
        live_gauge_pids = {int(path.stem.rsplit("_", 1)[1]) for path in folder.glob("gauge_live*.db")}
        return live_gauge_pids == {child.pid for child in api_processes.children()}

    eventually(live_gauges_of_live_processes_only, "the live gauges are not those of the live processes")
    _create(api_processes.base_url)  # and the replaced deployment still serves


def test_stop_api_processes_removes_their_metrics_folder(serve: Callable[[str], ApiProcesses], sqlite_url: str) -> None:
    api_processes = serve(sqlite_url)
    folder = api_processes.metrics_folder()
    stop_process(api_processes.supervisor)
    assert api_processes.supervisor.returncode == 0
    assert not folder.exists()


def test_serve_api_with_a_low_open_files_limit_relays_every_stream(
    redis_url: str, sqlite_url: str, tmp_path: Path
) -> None:
    """Started with a soft limit of 128 open files (as systemd's 1,024, smaller), the API raises it and
    follows 200 streams at once; it failed most of them, some with a 500, before it did."""
    settings = Settings(database_url=sqlite_url, redis_url=redis_url, models=[MODEL])
    api, base_url = start_api_process(settings, tmp_path / "api.log", open_files=128, fork=False)
    try:
        assert open_files_limit(api.pid) > 128

        async def first_events(count: int) -> list[str]:
            # Created and opened concurrently, as many clients would: 200 sockets at a time, twice.
            limits = httpx2.Limits(max_connections=count)
            async with httpx2.AsyncClient(base_url=base_url, timeout=30, limits=limits) as http:
                ids = await asyncio.gather(*(_create_async(http) for _ in range(count)))
                async with contextlib.AsyncExitStack() as streams:
                    opened = await asyncio.gather(*(
                        streams.enter_async_context(http.stream("GET", f"/v1/responses/{rid}?stream=true"))
                        for rid in ids))  # all open at once: one socket each, held
                    return [(await anext(stream.aiter_lines())) if stream.status_code == 200 else ""
                            for stream in opened]

        assert asyncio.run(first_events(200)) == ["event: response.created"] * 200
    finally:
        stop_process(api)


def test_serve_api_forgets_live_gauges_of_processes_gone_before_it(
    redis_url: str, sqlite_url: str, tmp_path: Path
) -> None:
    """One API process restarted (systemd, a container) on a kept PROMETHEUS_MULTIPROC_DIR: the streams
    its predecessor was relaying when it died are not counted as active."""
    folder = tmp_path / "prometheus"
    folder.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = folder / f"gauge_livesum_{gone.pid}.db"
    stale.write_bytes(b"")
    settings = Settings(database_url=sqlite_url, redis_url=redis_url, models=[MODEL])
    env = service_env(settings, PROMETHEUS_MULTIPROC_DIR=str(folder))
    api, base_url = start_api_process(settings, tmp_path / "api.log", env, fork=False)
    try:
        assert not stale.exists()
        assert list(folder.glob(f"gauge_livesum_{api.pid}.db"))
        assert httpx2.get(f"{base_url}/metrics", timeout=10).status_code == 200
    finally:
        stop_process(api)


def test_import_api_leaves_mcp_sdk_unloaded() -> None:
    # The API checks MCP servers against the policy but never calls one; the mcp SDK took 2 s of each
    # API process's start.
    script = ("import sys, oss_responses.api.__main__, oss_responses.api.app\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_serve_api_while_redis_does_not_answer_exits_in_one_line(sqlite_url: str, tmp_path: Path) -> None:
    # A Redis URL with a password, on a port where nothing listens: the event hub's start failed in uvicorn's
    # traceback of the lifespan ("ConnectionRefusedError"), naming neither Redis nor where it was looked for.
    port = free_port()
    settings = Settings(database_url=sqlite_url, redis_url=f"redis://:hub-pw-6e1d@127.0.0.1:{port}/0", models=[MODEL])
    env = service_env(settings, OSS_RESPONSES_API_PORT=str(free_port()), OSS_RESPONSES_LOG_FORMAT="text")
    done = subprocess.run([sys.executable, "-m", "oss_responses.api"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and "hub-pw-6e1d" not in done.stderr
    assert f"the API cannot start: Redis at redis://127.0.0.1:{port}/0 did not answer" in done.stderr


def test_serve_api_with_amqp_celery_broker_url_exits_in_one_line(sqlite_url: str, redis_url: str) -> None:
    # Celery's own CELERY_BROKER_URL wins over the setting: an AMQP broker there ended the start in a traceback
    # (redis-py refusing the scheme). The task queues are Redis lists.
    settings = Settings(database_url=sqlite_url, redis_url=redis_url, models=[MODEL])
    env = service_env(settings, OSS_RESPONSES_API_PORT=str(free_port()), OSS_RESPONSES_LOG_FORMAT="text",
                      CELERY_BROKER_URL="amqp://guest:amqp-pw-51c@127.0.0.1:5672//")
    done = subprocess.run([sys.executable, "-m", "oss_responses.api"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and "amqp-pw-51c" not in done.stderr
    assert "the API cannot start: the broker amqp://127.0.0.1:5672// is not a Redis" in done.stderr


def test_serve_api_whose_vocabulary_folder_cannot_be_made_exits_in_one_line(sqlite_url: str, redis_url: str,
                                                                            tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    settings = Settings(database_url=sqlite_url, redis_url=redis_url, models=[MODEL])
    env = service_env(settings, OSS_RESPONSES_API_PORT=str(free_port()), OSS_RESPONSES_LOG_FORMAT="text",
                      OSS_RESPONSES_TIKTOKEN_DIR=str(tmp_path / "a-file" / "tiktoken"))
    done = subprocess.run([sys.executable, "-m", "oss_responses.api"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert "the API cannot start: cannot unpack the vocabulary into" in done.stderr
