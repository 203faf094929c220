"""Fuzzing the running service: schemathesis from its OpenAPI document, then hypothesis-made Responses
bodies. Never a 5xx, the API process never dies, and a refused request leaves nothing half-written
(no row, no event stream, no task).

The API and a scripted worker run as real processes on SQLite and PostgreSQL. ``FUZZ_EXAMPLES``
(default 15) bounds the examples per operation and mode, and per body test; ``make fuzz`` runs 300.
The examples are the same on every run (derandomized) unless ``FUZZ_RANDOM`` is set.
Each test prints its figures (requests tried, 5xx seen).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis as redis_lib
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from sqlalchemy import func, select
from support import MODEL
from support.fuzz_bodies import create_body
from support.processes import (
    service_env,
    start_api_process,
    start_worker_process,
    stop_process,
)

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.storage import Database, ResponseRow

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "15"))
FUZZ_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                         derandomize="FUZZ_RANDOM" not in os.environ, suppress_health_check=list(HealthCheck))


@dataclass
class FuzzStack:
    settings: Settings
    base_url: str
    api: Any  # the API's process
    db: Database
    redis: redis_lib.Redis


@dataclass
class Tally:
    tried: int = 0
    server_errors: list[str] = field(default_factory=list)

    def record(self, what: str, status: int) -> None:
        self.tried += 1
        if status >= 500:
            self.server_errors.append(f"{what} -> {status}")


@pytest.fixture(scope="module")
def stack(stack_database_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzStack]:
    settings = Settings(database_url=stack_database_url, redis_url=redis_url, models=[MODEL])
    logs = tmp_path_factory.mktemp("fuzz-logs")
    # An allow-list, so that generated server_urls walk the normalisation and resolution paths too.
    env = service_env(settings, OSS_RESPONSES_MCP_URL_ALLOWLIST='["https://allowed.example/mcp/"]')
    worker = start_worker_process(settings, logs / "worker.log", env=env)
    api, base_url = start_api_process(settings, logs / "api.log", env=env)
    db = Database(settings.database_url)
    client = redis_lib.Redis.from_url(redis_url)
    try:
        yield FuzzStack(settings=settings, base_url=base_url, api=api, db=db, redis=client)
    finally:
        client.close()
        db.dispose()
        stop_process(api)
        stop_process(worker)
        for path in sorted(Path(logs).glob("*.log")):
            print(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")


def _state(stack: FuzzStack) -> tuple[int, int, int]:
    """Rows, event streams, tasks waiting: what a refused request must leave as it found them."""
    with stack.db.session() as session:
        rows = int(session.scalar(select(func.count()).select_from(ResponseRow)) or 0)
    streams = sum(1 for _ in stack.redis.scan_iter(match=redis_keys.events("*"), count=1000))
    return rows, streams, int(stack.redis.llen(stack.settings.queue_for(MODEL)))


def test_openapi_describes_create_body(stack: FuzzStack) -> None:
    document = httpx2.get(f"{stack.base_url}/openapi.json").json()
    body = document["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    create = document["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    assert {"model", "input", "tools", "text", "max_output_tokens"} <= set(create["properties"])
    assert create["required"] == ["model"] and create["additionalProperties"] is False
    body = document["paths"]["/v1/responses/compact"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    compact = document["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    assert set(compact["properties"]) == {"model", "input", "instructions", "previous_response_id", "prompt_cache_key"}


def test_schemathesis_finds_no_server_error(stack: FuzzStack) -> None:
    schema = schemathesis.openapi.from_url(f"{stack.base_url}/openapi.json")
    tally = Tally()
    no_negative: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @FUZZ_SETTINGS
            @given(case=operation.as_strategy(generation_mode=mode))
            def call(case: Any) -> None:
                response = case.call(base_url=stack.base_url, timeout=30)
                # On a 5xx the failure shows the request as a curl command, to reproduce it.
                tally.record(case.as_curl_command(), response.status_code)

            try:
                call()
            except Unsatisfiable:
                # Nothing invalid can be made for an operation without inputs (GET /healthz); only then.
                assert mode is GenerationMode.NEGATIVE, operation.label
                no_negative.append(operation.label)
    print(f"\nschemathesis: {tally.tried} requests tried, {len(tally.server_errors)} 5xx seen "
          f"(no invalid input possible for: {', '.join(no_negative) or 'none'})")
    assert tally.server_errors == []
    assert stack.api.poll() is None, "the API process died"


def test_generated_bodies_get_no_server_error_and_refusals_leave_nothing(stack: FuzzStack) -> None:
    tally = Tally()
    refused = 0

    @FUZZ_SETTINGS
    @given(body=create_body)
    def post(body: dict[str, Any]) -> None:
        nonlocal refused
        before = _state(stack)
        # json.dumps escapes lone surrogates, as a hostile client would send them (httpx2's json= cannot).
        response = httpx2.post(f"{stack.base_url}/v1/responses", content=json.dumps(body),
                               headers={"content-type": "application/json"}, timeout=30)
        tally.record(json.dumps(body)[:200], response.status_code)
        assert response.status_code < 500, response.text
        if response.status_code >= 400:
            refused += 1
            rows, streams, waiting = _state(stack)
            assert (rows, streams) == before[:2], f"a refused request left something behind: {body!r}"
            assert waiting <= before[2]  # the worker may take earlier tasks meanwhile; none is added
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}

    post()
    print(f"\ngenerated bodies: {tally.tried} requests tried, {refused} refused, {len(tally.server_errors)} 5xx seen")
    assert tally.server_errors == []
    assert stack.api.poll() is None, "the API process died"
