"""The worker command: one Celery worker, or (vLLM, several front ends) the supervisor of several."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib
from support import MODEL
from support.processes import ServiceProcess, start_worker_process, stop_process
from support.servers import RedisServer
from support.workers import accept

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.engine.frontends import Frontend
from oss_responses.storage import Database, migrate
from oss_responses.workers import command
from oss_responses.workers.celery_app import enqueue, make_celery


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], ["--hostname=frontend-1@%h"]),
        (["--loglevel=WARNING"], ["--loglevel=WARNING", "--hostname=frontend-1@%h"]),
        (["-n", "gpu0@%h"], ["-n", "gpu0-1@%h"]),
        (["-ngpu0@%h"], ["-ngpu0-1@%h"]),
        (["--hostname", "gpu0@host"], ["--hostname", "gpu0-1@host"]),
        (["--hostname=gpu0@%h", "-c", "4"], ["--hostname=gpu0-1@%h", "-c", "4"]),
        (["-n", "gpu0"], ["-n", "gpu0-1"]),
    ],
)
def test_frontend_argv_gives_each_front_end_its_own_node_name(extra: list[str], expected: list[str]) -> None:
    assert command.frontend_argv(extra, 1) == expected


def test_main_with_frontends_on_scripted_engine_runs_one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[Settings, list[str]]] = []
    monkeypatch.setattr(command, "get_settings", lambda: Settings(engine="scripted", vllm_frontends=2))
    monkeypatch.setattr(command, "run_worker", lambda settings, extra, frontend=None: ran.append((settings, extra)))
    monkeypatch.setattr(command, "serve_frontends", lambda *args: pytest.fail("no engine core to share"))

    command.main(["-n", "w@%h"])

    assert [extra for _, extra in ran] == [["-n", "w@%h"]]


def test_run_frontend_serves_metrics_on_the_port_plus_its_index(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[Settings, list[str], Frontend | None]] = []
    monkeypatch.setattr(command, "get_settings", lambda: Settings(engine="vllm", vllm_frontends=2,
                                                                  worker_metrics_port=9100))
    monkeypatch.setattr(command, "run_worker", lambda settings, extra, frontend=None: ran.append(
        (settings, extra, frontend)))
    frontend = Frontend(index=1, count=2, addresses={})

    command.run_frontend([], frontend)

    assert [(settings.worker_metrics_port, extra, used) for settings, extra, used in ran] == [
        (9101, ["--hostname=frontend-1@%h"], frontend)
    ]


def _settings(tmp_path: Path, redis: RedisServer, **overrides: Any) -> Settings:
    database_url = f"sqlite:///{tmp_path / 'oss-responses.db'}"
    migrate(database_url)
    return Settings(database_url=database_url, redis_url=redis.url, models=[MODEL], **overrides)


def _sigterm_with_redis_stopped(
    worker: ServiceProcess, redis: RedisServer, within: float
) -> tuple[int, float]:
    """Redis stopped (SIGSTOP: connected, never answering), then the worker's SIGTERM: its exit status, and the
    seconds it took (the caller SIGCONTs Redis)."""
    os.kill(redis.process.pid, signal.SIGSTOP)
    worker.send_signal(signal.SIGTERM)
    started = time.monotonic()
    try:
        status = worker.wait(timeout=within)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker was still there {within:.0f} s after its SIGTERM, with Redis stopped")
    return status, time.monotonic() - started


def test_stop_worker_exits_by_its_deadline_with_redis_stopped(own_redis: RedisServer, tmp_path: Path) -> None:
    # Redis frozen (SIGSTOP: connected, never answering) under a running response: Celery's own stop, the
    # response's handoff and the engine's stop waited on Redis call after call, and a SIGTERM took 66 s to exit,
    # past compose's 30 s grace period.
    settings = _settings(tmp_path, own_redis, scripted_tokens_per_second=40.0, worker_stop_seconds=3.0)
    log_path = tmp_path / "worker.log"
    worker = start_worker_process(settings, log_path)
    client = redis_lib.Redis.from_url(own_redis.url, socket_timeout=5)
    db = Database(settings.database_url)
    try:
        response_id = accept(db, client, settings, input="tokens 800", background=True)
        enqueue(make_celery(settings), settings, response_id, MODEL)
        deadline = time.monotonic() + 20
        while not client.exists(redis_keys.lease(response_id)):
            assert time.monotonic() < deadline, "the response never started"
            time.sleep(0.05)
        status, took = _sigterm_with_redis_stopped(worker, own_redis, within=12)
        assert took < 3.0 + 3
        assert status == command.EX_STOP_DEADLINE
        assert "not stopped within 3 s" in log_path.read_text()
    finally:
        os.kill(own_redis.process.pid, signal.SIGCONT)
        stop_process(worker)
        client.close()
        db.dispose()


def test_stop_idle_worker_with_redis_stopped_exits_at_once(own_redis: RedisServer, tmp_path: Path) -> None:
    # With nothing running there is nothing to wait for, but Celery's own stop waited on the silent broker (its
    # heartbeat, its pidbox's close, a reconnect) until the stop deadline: 25 s, then exit status 1.
    log_path = tmp_path / "worker.log"
    worker = start_worker_process(_settings(tmp_path, own_redis, worker_stop_seconds=30.0), log_path)
    try:
        time.sleep(3)  # Celery's heartbeat (every 2 s) under way: its PUBLISH is what waits first
        status, took = _sigterm_with_redis_stopped(worker, own_redis, within=15)
        assert (status, took < 10) == (0, True)
        assert "no task runs here and the broker does not answer" in log_path.read_text()
    finally:
        os.kill(own_redis.process.pid, signal.SIGCONT)
        stop_process(worker)


def test_stop_idle_worker_with_redis_answering_stops_as_celery_does(own_redis: RedisServer, tmp_path: Path) -> None:
    log_path = tmp_path / "worker.log"
    worker = start_worker_process(_settings(tmp_path, own_redis), log_path)
    try:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=15) == 0
        assert "the broker does not answer" not in log_path.read_text()
    finally:
        stop_process(worker)


def test_broker_answering_with_an_error_is_not_silent(own_redis: RedisServer) -> None:
    """A stopping idle worker exits at once only where the broker is silent (its stop would wait out each
    command's timeout); an error reply does not hold Celery's stop."""
    redis_lib.Redis.from_url(own_redis.url).config_set("requirepass", "s3cret")
    assert command._broker_answers(own_redis.url, 1.0)  # NOAUTH: an answer
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        assert not command._broker_answers(own_redis.url, 0.5)
    finally:
        own_redis.process.send_signal(signal.SIGCONT)


def test_kill_children_at_stop_deadline_leaves_no_child_behind(tmp_path: Path) -> None:
    # os._exit runs no atexit handler: an engine's processes (vLLM's engine core and its GPU memory) outlived it.
    pids = tmp_path / "pids"
    program = (
        "import subprocess, sys, time\n"
        "from oss_responses.workers import command\n"
        "children = [subprocess.Popen(['sleep', '60']) for _ in range(2)]\n"
        f"open({str(pids)!r}, 'w').write(' '.join(str(child.pid) for child in children))\n"
        "command._kill_children()\n"
        "sys.exit(sorted(child.wait(5) for child in children) != [-9, -9])\n"
    )
    assert subprocess.run([sys.executable, "-c", program], timeout=60).returncode == 0, pids.read_text()
