"""The API tool tests' world: a Celery worker and an API process as real processes, configured with the
MCP servers by label, and the checks every tool stream gets (openai's event types, the SDK's
accumulator, the stored response)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openai import OpenAI
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from oss_responses.config import Settings
from oss_responses.storage import Database
from support.processes import ServiceProcess, start_worker_process, stop_process
from support.sdk import wait_ended, without_parsed

# Every call's timeout in the stack, so also the slow tool's; cancel tests act well within it. At 2 s a
# failing tool's quick call timed out once under a fresh-clone CI's load (2026-12-02).
CALL_TIMEOUT_S = 5.0
REFUSED_PREFIX = "http://127.0.0.1:1/"  # allow-listed, yet loopback: refused as private
_events = TypeAdapter(ResponseStreamEvent)


@dataclass
class ToolStack:
    settings: Settings
    db: Database
    client: OpenAI
    logs: Path
    worker: ServiceProcess | None = None
    processes: list[ServiceProcess] = field(default_factory=list)

    def start_worker(self) -> None:
        self.worker = start_worker_process(self.settings, self.logs / f"worker-{len(self.processes)}.log")
        self.processes.append(self.worker)

    def restart_worker(self) -> None:
        """Kill the worker (no graceful shutdown) and start a fresh one."""
        assert self.worker is not None
        self.worker.kill()
        self.worker.wait()
        self.start_worker()

    def stop(self) -> None:
        for process in reversed(self.processes):
            stop_process(process)


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
