"""The worker command: one Celery worker, or (vLLM, several front ends) the supervisor of several."""

from __future__ import annotations

import pytest

from oss_responses.config import Settings
from oss_responses.engine.frontends import Frontend
from oss_responses.workers import command


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
