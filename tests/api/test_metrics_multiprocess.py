"""``PROMETHEUS_MULTIPROC_DIR``: an API served by several processes (uvicorn ``--workers 2``) counts in one
folder, and ``/metrics`` of whichever process answers is the sum over all of them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families
from support import MODEL, REPO
from support.processes import service_env, stop_process, wait_until
from support.servers import free_port

from oss_responses.config import Settings

REQUESTS = 12


@pytest.fixture
def multiprocess_api(database_url: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    folder = tmp_path / "prometheus"
    folder.mkdir()
    port = free_port()
    env = service_env(Settings(database_url=database_url, redis_url=redis_url, models=[MODEL]),
                      PROMETHEUS_MULTIPROC_DIR=str(folder))
    with (tmp_path / "api.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "oss_responses.api.app:create_app", "--workers", "2",
             "--host", "127.0.0.1", "--port", str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"

    def both_up() -> bool:
        try:
            ok = httpx2.get(f"{base_url}/healthz", timeout=1).status_code == 200
        except httpx2.HTTPError:
            return False
        return ok and len(list(folder.glob("counter_*.db"))) >= 2

    try:
        wait_until(both_up, process, "the API processes")
        yield base_url, folder
    finally:
        stop_process(process)


def _accepted(text: str) -> float:
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "oss_responses_accepted_total")


def test_read_metrics_sums_every_api_process(multiprocess_api: tuple[str, Path], tmp_path: Path) -> None:
    base_url, folder = multiprocess_api
    for _ in range(REQUESTS):  # a new connection each: either process may accept it
        created = httpx2.post(f"{base_url}/v1/responses", json={"model": MODEL, "input": "hi", "background": True},
                              timeout=10)
        assert created.status_code == 200
    for _ in range(6):
        assert _accepted(httpx2.get(f"{base_url}/metrics", timeout=10).text) == REQUESTS
    per_process = []
    for index, path in enumerate(sorted(folder.glob("counter_*.db"))):
        alone = tmp_path / f"alone-{index}"
        alone.mkdir()
        shutil.copyfile(path, alone / path.name)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))
        per_process.append(sum(s.value for m in registry.collect() for s in m.samples
                               if s.name == "oss_responses_accepted_total"))
    assert len(per_process) == 2 and sum(per_process) == REQUESTS
