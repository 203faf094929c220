"""Flower, Celery's dashboard, against a real worker: it sees the worker, its queue and its tasks.

Flower runs without ``-A``: the service's Celery app uses its own Redis transport (``broker.py``),
which Flower's broker page cannot read; on the plain ``redis://`` URL Flower learns the tasks and
queues from the workers themselves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_lib
from support import MODEL
from support.servers import START_TIMEOUT_S, free_port
from support.streams import wait_for_end
from support.workers import accept, worker_settings

from oss_responses.statuses import RUN_RESPONSE_TASK
from oss_responses.storage import Database
from oss_responses.workers.celery_app import enqueue, make_celery


def wait_for(fetch: Callable[[], Any], accept_value: Callable[[Any], bool]) -> Any:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            value = fetch()
            if accept_value(value):
                return value
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise TimeoutError("flower never showed it")


@pytest.fixture
def flower(redis_url: str, tmp_path: Path) -> Iterator[httpx.Client]:
    port = free_port()
    celery = Path(sys.executable).parent / "celery"
    env = os.environ | {"FLOWER_UNAUTHENTICATED_API": "true"}  # the API is for this test only
    with (tmp_path / "flower.log").open("w") as log:
        proc = subprocess.Popen(
            [str(celery), f"--broker={redis_url}", "flower", f"--port={port}", "--address=127.0.0.1"],
            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield client
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # Flower sees Redis only
def test_flower_shows_worker_with_its_queue_and_task(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker, flower: httpx.Client  # type: ignore[no-untyped-def]
) -> None:
    settings = worker_settings(database_url, redis_url)
    worker = start_worker(settings, "flower")

    workers = wait_for(lambda: flower.get("/api/workers", params={"refresh": "1"}).json(),
                       lambda found: any(name.startswith("flower@") for name in found))
    [info] = [info for name, info in workers.items() if name.startswith("flower@")]
    queues = sorted([f"responses.{MODEL}", settings.webhook_queue])  # a worker also delivers webhooks
    assert sorted(queue["name"] for queue in info["active_queues"]) == queues
    assert RUN_RESPONSE_TASK in info["registered"]
    lengths = flower.get("/api/queues/length").json()["active_queues"]
    assert sorted(lengths, key=lambda q: q["name"]) == [{"name": name, "messages": 0} for name in queues]

    # Flower switches the workers' task events on (they are off by default); then it sees each task.
    wait_for(worker.log.read_text, lambda log: "enabled by remote" in log)
    db = Database(settings.database_url)
    response_id = accept(db, redis, settings, input="seen by flower", background=True)
    enqueue(make_celery(settings), settings, response_id, MODEL)
    wait_for_end(redis, response_id)
    db.dispose()

    tasks = wait_for(lambda: flower.get("/api/tasks").json(),
                     lambda found: any(task["state"] == "SUCCESS" for task in found.values()))
    [task] = tasks.values()
    assert task["name"] == RUN_RESPONSE_TASK and response_id in task["args"]
    assert task["result"] == "'completed'"
