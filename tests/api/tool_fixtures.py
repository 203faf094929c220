"""The tool tests' world: the demo MCP servers, a Celery worker and an API process as real processes,
configured with the servers by label, and the checks every tool stream gets (openai's event types,
the SDK's accumulator, the stored response)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis as redis_lib
from api_server import REPO, service_env, start_api_process, stop_process, wait_until
from openai import OpenAI
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from support.servers import free_port

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.storage import Database
from support.sdk import without_parsed

MISBEHAVING = REPO / "tests" / "tools" / "misbehaving_server.py"
CALL_TIMEOUT_S = 2.0  # the slow tool's timeout; cancel tests act well within it
REFUSED_PREFIX = "http://127.0.0.1:1/"  # allow-listed, yet loopback: refused as private
POLL_S = 0.02
DEADLINE_S = 20.0
_events = TypeAdapter(ResponseStreamEvent)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


@contextmanager
def mcp_server(*command: str) -> Iterator[str]:
    """An MCP server process (Streamable HTTP) on a free loopback port; its URL."""
    port = free_port()
    process = subprocess.Popen([sys.executable, *command, "--port", str(port)], cwd=REPO,
                               env={**os.environ, "PYTHONPATH": str(REPO)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _listening(port), process, f"the MCP server {command}")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(process)


def tool_env(settings: Settings) -> dict[str, str]:
    """The service environment plus the MCP settings (the API resolves servers too)."""
    return service_env(
        settings,
        OSS_RESPONSES_TOOL_SERVERS=json.dumps(settings.tool_servers),
        OSS_RESPONSES_MCP_URL_ALLOWLIST=json.dumps(settings.mcp_url_allowlist),
        OSS_RESPONSES_MCP_CALL_TIMEOUT_SECONDS=str(settings.mcp_call_timeout_seconds),
    )


@dataclass
class ToolStack:
    settings: Settings
    db: Database
    client: OpenAI
    logs: Path
    worker: subprocess.Popen[bytes] | None = None
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start_worker(self) -> None:
        client = redis_lib.Redis.from_url(self.settings.redis_url)
        before = set(client.scan_iter(redis_keys.worker_ready("*")))
        log = (self.logs / f"worker-{len(self.processes)}.log").open("wb")
        self.worker = subprocess.Popen([sys.executable, "-m", "oss_responses.workers", "--loglevel=WARNING"],
                                       cwd=REPO, env=tool_env(self.settings), stdout=log, stderr=subprocess.STDOUT)
        self.processes.append(self.worker)
        wait_until(lambda: bool(set(client.scan_iter(redis_keys.worker_ready("*"))) - before), self.worker, "the worker")
        client.close()

    def restart_worker(self) -> None:
        """Kill the worker (no graceful shutdown) and start a fresh one."""
        assert self.worker is not None
        self.worker.kill()
        self.worker.wait()
        self.start_worker()

    def stop(self) -> None:
        for process in reversed(self.processes):
            stop_process(process)


def start_api(settings: Settings, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    return start_api_process(settings, log_path, env=tool_env(settings))


# --- running responses and checking their streams ----------------------------------------------------


def stream_response(client: OpenAI, **body: Any) -> tuple[list[ResponseStreamEvent], Response]:
    """Create with stream=true through the SDK's stream helper; its events and accumulated Response."""
    with client.responses.stream(**body) as stream:
        events = list(stream)
        final = stream.get_final_response()
    check_events(client, events, final)
    return events, final


def poll_response(client: OpenAI, **body: Any) -> Response:
    """Create with background=true, poll until it ends; then replay and check its stream."""
    created = client.responses.create(background=True, **body)
    assert created.status == "queued"
    response = wait_ended(client, created.id)
    with client.responses.stream(response_id=created.id) as stream:
        events = list(stream)
        replayed = stream.get_final_response() if response.status != "cancelled" else None
    check_events(client, events, replayed)
    return response


def wait_ended(client: OpenAI, response_id: str) -> Response:
    deadline = time.monotonic() + DEADLINE_S
    while (response := client.responses.retrieve(response_id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, f"{response_id} still {response.status}"
        time.sleep(POLL_S)
    return response


def check_events(client: OpenAI, events: list[ResponseStreamEvent], final: Response | None) -> None:
    """Every event one of openai's, numbered in order; the accumulated output is the stored one."""
    assert [e.sequence_number for e in events] == list(range(len(events)))
    models = [_events.validate_python(e.model_dump(mode="json", exclude_unset=True, warnings=False)) for e in events]
    added = [e.output_index for e in models if e.type == "response.output_item.added"]
    done = [e.output_index for e in models if e.type == "response.output_item.done"]
    assert added == list(range(len(added))) == done
    if final is None:
        return
    stored = client.responses.with_raw_response.retrieve(final.id).http_response.json()
    assert [without_parsed(item.to_dict()) for item in final.output] == stored["output"]




def types_of(response: Response) -> list[str]:
    return [item.type for item in response.output]


def item(response: Response, kind: str) -> Any:
    (found,) = [i for i in response.output if i.type == kind]
    return found
