"""Redis restarts under a client's stream: an API process, a Celery worker process and the openai SDK
streaming a background response, while the redis-server they share is SIGKILLed and started again.

- With AOF (nothing lost): the SDK's stream goes on to ``response.completed``, contiguous, with the
  whole answer; the worker process lives through it (no supervisor restarts it).
- Without persistence (the stream, journal and lease are gone): the stream ends at once with an
  ``error`` event (``event_log_lost``), and the response ends ``failed`` saying why. Nothing hangs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from openai.types.responses import ResponseStreamEvent
from support import MODEL
from support.processes import start_api_process, start_worker_process, stop_process
from support.sdk import wait_ended
from support.servers import RedisServer, start_redis
from support.sockets import receive, text_of, until_end

from oss_responses import relays
from oss_responses.config import Settings
from oss_responses.statuses import TERMINAL_EVENT_TYPES
from oss_responses.storage import migrate

ANSWER_TOKENS = 200  # 5 s at the speed below: the restart falls well inside it


@dataclass
class RestartStack:
    redis: RedisServer
    client: OpenAI
    worker: object  # subprocess.Popen


@pytest.fixture(params=["aof", "no persistence"])
def restart_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RestartStack]:
    server = start_redis(appendonly=request.param == "aof")
    database_url = f"sqlite:///{tmp_path / 'oss-responses.db'}"
    migrate(database_url)
    settings = Settings(database_url=database_url, redis_url=server.url, models=[MODEL],
                        scripted_tokens_per_second=40.0, lease_seconds=1.5, reaper_interval_seconds=0.3)
    processes = []
    try:
        api, base_url = start_api_process(settings, tmp_path / "api.log")
        processes.append(api)
        worker = start_worker_process(settings, tmp_path / "worker.log")
        processes.append(worker)
        with OpenAI(base_url=f"{base_url}/v1", api_key="test", max_retries=0, timeout=60) as client:
            yield RestartStack(redis=server, client=client, worker=worker)
    finally:
        for process in reversed(processes):
            stop_process(process)
        server.stop()


def _through_restart(stack: RestartStack, consume: Callable[[threading.Event], None], down_s: float = 1.0) -> None:
    """Run ``consume`` (a client reading a response; it sets the event once 20 events are in) while Redis
    is killed, then restarted ``down_s`` later."""
    deltas_seen = threading.Event()
    reader = threading.Thread(target=consume, args=(deltas_seen,), name="client")
    reader.start()
    assert deltas_seen.wait(20), "the answer did not start"
    stack.redis.kill()
    time.sleep(down_s)
    stack.redis.restart()  # from this thread: the server dies with the thread that started it
    reader.join(timeout=60)
    assert not reader.is_alive(), "the client's stream hung"


def _stream_through_restart(
    stack: RestartStack, *, background: bool = True, down_s: float = 1.0
) -> list[ResponseStreamEvent]:
    """The SDK's events of a stream (background unless asked) during which Redis restarts."""
    events: list[ResponseStreamEvent] = []

    def consume(deltas_seen: threading.Event) -> None:
        stream = stack.client.responses.create(model=MODEL, input=f"tokens {ANSWER_TOKENS}", stream=True,
                                               background=background)
        for event in stream:
            events.append(event)
            if event.type == "response.output_text.delta" and event.sequence_number > 20:
                deltas_seen.set()

    _through_restart(stack, consume, down_s)
    return events


def _socket_through_restart(stack: RestartStack) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The messages of a response over the Responses WebSocket during which Redis restarts, then those of
    the next response on the same connection."""
    events: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []

    def consume(deltas_seen: threading.Event) -> None:
        with stack.client.responses.connect() as connection:
            connection.response.create(model=MODEL, input=f"tokens {ANSWER_TOKENS}")
            while events[-1:] == [] or events[-1]["type"] not in (*TERMINAL_EVENT_TYPES, "error"):
                events.append(receive(connection))
                if events[-1]["type"] == "response.output_text.delta" and events[-1]["sequence_number"] > 20:
                    deltas_seen.set()
            connection.response.create(model=MODEL, input="after the restart")
            after.extend(until_end(connection))

    _through_restart(stack, consume)
    return events, after



@pytest.mark.parametrize("restart_stack", ["aof"], indirect=True)
def test_stream_goes_on_through_redis_restart_with_aof(restart_stack: RestartStack) -> None:
    events = _stream_through_restart(restart_stack)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert len(text.split()) == ANSWER_TOKENS
    assert restart_stack.worker.poll() is None, "the worker died with its broker connection"  # type: ignore[attr-defined]
    stored = restart_stack.client.responses.retrieve(events[0].response.id)  # type: ignore[union-attr]
    assert stored.status == "completed" and stored.output_text == text
    # The API's pooled Redis connections went stale with the restart: the next create still goes through.
    after = restart_stack.client.responses.create(model=MODEL, input="after the restart")
    assert after.status == "completed"


@pytest.mark.parametrize("restart_stack", ["aof"], indirect=True)
def test_foreground_stream_goes_on_through_redis_down_past_its_api_liveness(restart_stack: RestartStack) -> None:
    """Redis comes back without the API process's liveness key (it lapsed while Redis was down): the reaper
    waits for the process to write it again rather than cancel the foreground response it relays (relays.py)."""
    events = _stream_through_restart(restart_stack, background=False, down_s=relays.ALIVE_SECONDS + 2)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    assert wait_ended(restart_stack.client, events[0].response.id).status == "completed"  # type: ignore[union-attr]


@pytest.mark.parametrize("restart_stack", ["no persistence"], indirect=True)
def test_stream_ends_with_error_when_redis_loses_its_data(restart_stack: RestartStack) -> None:
    events = _stream_through_restart(restart_stack)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "error" and events[-1].code == "event_log_lost"  # type: ignore[union-attr]
    response = wait_ended(restart_stack.client, events[0].response.id)  # type: ignore[union-attr]
    assert response.status == "failed"
    assert response.error is not None and response.error.message.startswith("event_log_lost")
    assert restart_stack.worker.poll() is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("restart_stack", ["aof"], indirect=True)
def test_socket_goes_on_through_redis_restart_with_aof(restart_stack: RestartStack) -> None:
    events, after = _socket_through_restart(restart_stack)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert len(text_of(events).split()) == ANSWER_TOKENS
    assert after[-1]["type"] == "response.completed" and text_of(after) == "You said: \"after the restart\".", after


@pytest.mark.parametrize("restart_stack", ["no persistence"], indirect=True)
def test_socket_response_ends_with_error_when_redis_loses_its_data_and_socket_goes_on(
    restart_stack: RestartStack,
) -> None:
    events, after = _socket_through_restart(restart_stack)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "event_log_lost"
    response = wait_ended(restart_stack.client, events[0]["response"]["id"])
    assert response.status in ("failed", "cancelled")  # the worker finds its progress gone; the relay cancels
    assert after[-1]["type"] == "response.completed"
