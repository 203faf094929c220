"""What operators see of a running service: JSON logs carrying each response's context and never a
secret, the request id, the worker's /metrics, and webhooks; an API process and a Celery worker
process (scripted engine), an MCP server that sees the request's credentials, a webhook endpoint,
everything logged at DEBUG."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
import websockets.sync.client as ws_client
from openai.types.responses import Response
from prometheus_client.parser import text_string_to_metric_families
from support import MODEL, REPO
from support.mcp import MISBEHAVING, mcp_server
from support.processes import (
    ServiceProcess,
    service_env,
    start_api_process,
    start_worker_process,
    stop_process,
)
from support.servers import free_port
from support.tool_stack import poll_response
from support.webhook_receiver import WebhookReceiver

from oss_responses.config import Settings
from oss_responses.sealing import new_key
from oss_responses.statuses import TERMINAL_EVENT_TYPES

AUTHORIZATION = "tok-obs-authorization-3f9a"
HEADER_SECRET = "hdr-obs-header-77c1"
# A receiver's Basic credentials in its URL's userinfo.
WEBHOOK_URL_PASSWORD = "obs-hook-password-41d7"
BAD = {"type": "mcp", "server_label": "bad", "require_approval": "never",
       "authorization": AUTHORIZATION, "headers": {"X-Obs-Secret": HEADER_SECRET}}


@dataclass
class Observed:
    client: openai.OpenAI
    base_url: str
    metrics_url: str
    logs: Path
    receiver: WebhookReceiver
    refusing: WebhookReceiver  # answers 500 to every attempt: each is a WARNING and a Celery retry
    env: dict[str, str]
    secrets: list[str]

    def lines(self, name: str) -> list[dict[str, Any]]:
        """The JSON log lines of a process (Celery's start-up banner is printed, not logged: skipped)."""
        text = (self.logs / f"{name}.log").read_text(errors="replace")
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def observed(redis_url: str, sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    folder = tmp_path_factory.mktemp("observed")
    shutil.copyfile(sqlite_template, folder / "db.sqlite")
    key = new_key()
    receiver = WebhookReceiver().start()
    refusing = WebhookReceiver(fail_first=1_000_000).start()
    metrics_port = free_port()
    processes: list[ServiceProcess] = []
    with mcp_server(*MISBEHAVING) as bad_url:
        settings = Settings(database_url=f"sqlite:///{folder / 'db.sqlite'}", redis_url=redis_url, models=[MODEL],
                            scripted_tokens_per_second=2000.0)
        env = service_env(
            settings, OSS_RESPONSES_LOG_FORMAT="json", OSS_RESPONSES_LOG_LEVEL="DEBUG",
            OSS_RESPONSES_ENCRYPTION_KEYS=json.dumps([key]),
            OSS_RESPONSES_TOOL_SERVERS=json.dumps({"bad": bad_url}),
            OSS_RESPONSES_WEBHOOK_ENDPOINTS=json.dumps([
                {"url": _with_password(receiver.url), "secret": receiver.secret},
                {"url": _with_password(refusing.url), "secret": refusing.secret},
            ]),
            OSS_RESPONSES_WEBHOOK_MAX_ATTEMPTS="2", OSS_RESPONSES_WEBHOOK_BACKOFF_SECONDS="0.2",
            OSS_RESPONSES_WORKER_METRICS_PORT=str(metrics_port),
        )
        try:
            api, base_url = start_api_process(settings, folder / "api.log", env=env)
            processes.append(api)
            processes.append(start_worker_process(settings, folder / "worker.log", env=env))
            with openai.OpenAI(base_url=f"{base_url}/v1", api_key="test", max_retries=0, timeout=30) as client:
                yield Observed(client, base_url, f"http://127.0.0.1:{metrics_port}/metrics", folder, receiver,
                               refusing, env, secrets=[AUTHORIZATION, HEADER_SECRET, key, receiver.secret,
                                                       refusing.secret, WEBHOOK_URL_PASSWORD])
        finally:
            for process in reversed(processes):
                stop_process(process)
            receiver.stop()
            refusing.stop()


def _with_password(url: str) -> str:
    return url.replace("http://", f"http://obs-hook:{WEBHOOK_URL_PASSWORD}@", 1)


@pytest.fixture(scope="module")
def tool_response(observed: Observed) -> Response:
    """A background response whose MCP call carries the request's credentials (the server echoes them)."""
    response = poll_response(observed.client, model=MODEL, input="call bad.authorization {}", tools=[BAD])
    assert response.status == "completed"
    observed.receiver.wait_for(1)  # its webhook: the worker has logged everything about it by then
    return response


def test_log_lines_about_response_carry_its_context(observed: Observed, tool_response: Response) -> None:
    # The service's own lines (Celery's consumer logs a task's arguments at DEBUG before any task runs).
    about = [line for line in observed.lines("worker")
             if tool_response.id in line["message"] and line["logger"].startswith("oss_responses")]
    assert about, "the worker logged nothing naming the response"
    assert all(line.get("response_id") == tool_response.id for line in about)
    assert all(line.get("model") == MODEL and line.get("worker_id") for line in about)
    tagged = [line for line in observed.lines("worker") if line.get("response_id") == tool_response.id]
    assert {line["logger"] for line in tagged} >= {"oss_responses.workers.tasks"}


def test_log_lines_of_request_carry_request_id(observed: Observed) -> None:
    answer = httpx2.post(f"{observed.base_url}/v1/responses", headers={"x-request-id": "trace-obs-1"},
                         json={"model": MODEL, "input": "traced", "background": True}, timeout=10)
    assert answer.headers["x-request-id"] == "trace-obs-1"
    traced = [line for line in observed.lines("api") if line.get("request_id") == "trace-obs-1"]
    assert traced and all(line["response_id"] == answer.json()["id"] for line in traced)


@pytest.mark.parametrize("path", ["", "/input_items"])
def test_log_lines_of_request_naming_response_carry_its_model(
    observed: Observed, tool_response: Response, path: str
) -> None:
    request_id = f"trace-obs-get{path.replace('/', '-')}"
    answer = httpx2.get(f"{observed.base_url}/v1/responses/{tool_response.id}{path}",
                        headers={"x-request-id": request_id}, timeout=10)
    assert answer.status_code == 200
    traced = [line for line in observed.lines("api") if line.get("request_id") == request_id]
    assert traced and all(line.get("model") == MODEL for line in traced), traced


def test_logs_never_show_secrets(observed: Observed, tool_response: Response) -> None:
    call = next(item for item in tool_response.output if item.type == "mcp_call")
    assert call.output == f"Bearer {AUTHORIZATION}"  # the credentials did reach the tool server
    for name in ("api", "worker"):
        text = (observed.logs / f"{name}.log").read_text(errors="replace")
        assert any(line.get("level") == "DEBUG" for line in observed.lines(name))  # the search covered DEBUG
        leaked = [secret for secret in observed.secrets if secret in text]
        assert leaked == [], f"{name}.log shows {leaked}"


def test_logs_never_show_secrets_sent_over_websocket(observed: Observed) -> None:
    # At DEBUG the websockets library logs a handshake's headers and each frame's first and last bytes.
    key, authorization = "sk-obs-socket-key-9d2e", "tok-obs-socket-5b8c"
    url = observed.base_url.replace("http://", "ws://") + "/v1/responses"
    tool = BAD | {"authorization": authorization, "headers": {}}
    with ws_client.connect(url, additional_headers={"Authorization": f"Bearer {key}"}, max_queue=None) as socket:
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "call bad.authorization {}",
                                "tools": [tool]}))
        while json.loads(socket.recv(timeout=30))["type"] not in TERMINAL_EVENT_TYPES:
            pass
    text = (observed.logs / "api.log").read_text(errors="replace")
    assert "uvicorn.error" in text  # the socket's DEBUG lines that carry no traffic are still there
    assert [secret for secret in (key, authorization) if secret in text] == []


def test_webhook_url_password_stays_out_of_logs_and_delivery_log(observed: Observed, tool_response: Response) -> None:
    [delivery] = observed.receiver.of(tool_response.id)
    credentials = base64.b64decode(delivery.headers["authorization"].removeprefix("Basic ")).decode()
    assert credentials == f"obs-hook:{WEBHOOK_URL_PASSWORD}"  # the receiver still gets them, as Basic auth
    observed.refusing.wait_for(2)  # both attempts refused: two WARNING lines, a Celery retry between
    deadline = time.monotonic() + 30
    while "attempt 2" not in (observed.logs / "worker.log").read_text(errors="replace"):
        assert time.monotonic() < deadline, "the worker did not log the second attempt"
        time.sleep(0.1)
    for name in ("api", "worker"):
        assert WEBHOOK_URL_PASSWORD not in (observed.logs / f"{name}.log").read_text(errors="replace"), name
    listed = subprocess.run([sys.executable, "-m", "oss_responses.webhooks", "list", "--json"], cwd=REPO,
                            env=observed.env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert tool_response.id in listed and WEBHOOK_URL_PASSWORD not in listed


def test_worker_metrics_count_response(observed: Observed, tool_response: Response) -> None:
    text = httpx2.get(observed.metrics_url, timeout=5).text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("oss_responses_output_tokens_total", (("model", MODEL),))] > 0
    assert samples[("oss_responses_time_to_first_token_seconds_count", (("model", MODEL),))] >= 1
    assert samples[("oss_responses_event_write_seconds_count", ())] > 0
    assert samples[("oss_responses_mcp_call_seconds_count", (("server", "bad"),))] >= 1
    assert samples[("oss_responses_worker_tasks_total", (("model", MODEL), ("outcome", "completed")))] >= 1
    assert samples[("oss_responses_responses_ended_total", (("model", MODEL), ("status", "completed")))] >= 1
    delivered = (("event_type", "response.completed"), ("result", "delivered"))
    assert samples[("oss_responses_webhook_deliveries_total", delivered)] >= 1


def test_webhook_of_response_verifies(observed: Observed, tool_response: Response) -> None:
    [delivery] = observed.receiver.of(tool_response.id)
    assert delivery.error is None and delivery.event.type == "response.completed"
