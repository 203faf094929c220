"""The Responses API's WebSocket mode (``WS /v1/responses``), as the official SDK uses it
(``client.responses.connect()``): a Celery worker process with the scripted engine and an API process,
on SQLite and on PostgreSQL. The scripted engine quotes the last user message and, in a later turn,
the earlier ones ("Earlier you said: ..."), so an answer shows which conversation the model was given.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import websockets.sync.client as ws_client
from openai import OpenAI
from support import MODEL
from support.processes import start_api_process, start_worker_process, stop_process
from support.sockets import receive, text_of, until_end
from websockets.exceptions import ConnectionClosed

from oss_responses.api.socket import KEEP_PARSED_BYTES, MAX_WAITING_COMMANDS
from oss_responses.config import Settings
from oss_responses.eventlog import parse_frame
from oss_responses.statuses import ACTIVE_STATUSES
from oss_responses.storage import Database, get_response

MAX_BODY_BYTES = 1_000_000
TOKENS_PER_SECOND = 400.0
LONG = "tokens 4000"  # about ten seconds of answer at that speed
DEADLINE_S = 20.0


@dataclass
class Stack:
    settings: Settings
    db: Database
    base_url: str
    client: OpenAI
    logs: Path


@pytest.fixture(scope="module")
def stack(stack_database_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = Settings(database_url=stack_database_url, redis_url=redis_url, models=[MODEL],
                        scripted_tokens_per_second=TOKENS_PER_SECOND, max_body_bytes=MAX_BODY_BYTES)
    logs = tmp_path_factory.mktemp("socket-logs")
    worker = start_worker_process(settings, logs / "worker.log")
    try:
        api, base_url = start_api_process(settings, logs / "api.log")
        try:
            db = Database(settings.database_url)
            with OpenAI(base_url=f"{base_url}/v1", api_key="test", max_retries=0, timeout=30) as client:
                yield Stack(settings=settings, db=db, base_url=base_url, client=client, logs=logs)
            db.dispose()
        finally:
            stop_process(api)
    finally:
        stop_process(worker)
        for path in sorted(logs.glob("*.log")):
            print(f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}")


def _raw_socket(base_url: str) -> ws_client.ClientConnection:
    # Every message is buffered (websockets' default stops reading at 16 unread ones): a test that closes
    # with messages unread still reads the server's close frame, instead of waiting out the client's 10 s
    # close timeout (test_create_on_lane_past_limit_is_refused did, 10 s on each backend).
    return ws_client.connect(base_url.replace("http://", "ws://") + "/v1/responses", max_queue=None)


def _send(socket: ws_client.ClientConnection, **command: Any) -> None:
    socket.send(json.dumps({"type": "response.create", "model": MODEL} | command))


def _next(socket: ws_client.ClientConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(socket.recv(timeout=DEADLINE_S))
    return message


def _wait_for_status(stack: Stack, response_id: str) -> str:
    deadline = time.monotonic() + DEADLINE_S
    while (status := stack.db.run(get_response, response_id).status) in ACTIVE_STATUSES:
        assert time.monotonic() < deadline, f"{response_id} still {status}"
        time.sleep(0.02)
    return status


def test_create_streams_same_events_as_sse(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="hello over the socket")
        events = until_end(connection)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert text_of(events) == events[-1]["response"]["output"][-1]["content"][0]["text"]
    response_id = events[0]["response"]["id"]
    with stack.client.with_streaming_response.responses.retrieve(response_id, stream=True) as replay:
        frames = [parse_frame(chunk + b"\n\n") for chunk in replay.read().split(b"\n\n") if chunk]
    assert frames == events


def test_create_named_lanes_run_side_by_side_with_their_stream_id(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="tokens 200", stream_id="first")
        connection.response.create(model=MODEL, input="tokens 200", stream_id="second")
        events: list[dict[str, Any]] = []
        while sum(event["type"] == "response.completed" for event in events) < 2:
            events.append(receive(connection))
    order = [event["stream_id"] for event in events]
    assert set(order) == {"first", "second"}
    # Both started before either ended: the second lane did not wait for the first.
    assert order.index("second") < len(order) - 1 - order[::-1].index("first")
    for lane in ("first", "second"):
        numbers = [event["sequence_number"] for event in events if event["stream_id"] == lane]
        assert numbers == list(range(len(numbers)))


def test_create_on_one_lane_runs_after_previous_one_ended(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="tokens 50")
        connection.response.create(model=MODEL, input="second")
        first, second = until_end(connection), until_end(connection)
    assert first[-1]["type"] == second[-1]["type"] == "response.completed"
    assert first[0]["response"]["id"] != second[0]["response"]["id"]
    assert second[0]["sequence_number"] == 0 and text_of(second) == 'You said: "second".'


def test_continue_unstored_response_by_id_on_same_connection(stack: Stack) -> None:
    # Codex's way over the socket: store=false, then only the new input and the last response's id.
    with stack.client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Remember the word marmalade", store=False)
        first = until_end(connection)
        connection.response.create(model=MODEL, input="Which word was it?", store=False,
                                   previous_response_id=first[-1]["response"]["id"])
        second = until_end(connection)
    assert second[-1]["type"] == "response.completed", second[-1]
    answer = text_of(second)
    assert answer.startswith('You said: "Which word was it?". Earlier you said:')
    assert '"Remember the word marmalade"' in answer


def test_continue_unstored_response_from_other_connection_is_previous_response_not_found(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="only here", store=False)
        first_id = until_end(connection)[-1]["response"]["id"]
    with stack.client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="and now?", previous_response_id=first_id)
        error = receive(connection)
    assert error["type"] == "error" and error["status"] == 400
    assert error["error"]["code"] == "previous_response_not_found"


def test_continue_stored_response_from_other_connection(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Remember the word quince")
        first_id = until_end(connection)[-1]["response"]["id"]
    with stack.client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Which word was it?", previous_response_id=first_id)
        second = until_end(connection)
    assert '"Remember the word quince"' in text_of(second)


def test_warm_up_prepares_conversation_without_output(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Remember the word damson", store=False, generate=False)
        warm = until_end(connection)
        connection.response.create(model=MODEL, input="Which word was it?", store=False,
                                   previous_response_id=warm[-1]["response"]["id"])
        answer = text_of(until_end(connection))
    assert [event["type"] for event in warm] == ["response.created", "response.completed"]
    assert warm[-1]["response"]["output"] == [] and warm[-1]["response"]["status"] == "completed"
    assert '"Remember the word damson"' in answer


def test_fork_other_lane_from_latest_response_of_lane(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Remember the word greengage", store=False, stream_id="main")
        parent = until_end(connection)[-1]["response"]["id"]
        connection.response.create(model=MODEL, input="Which word was it?", store=False,
                                   previous_response_id=parent, stream_id="fork")
        fork = until_end(connection)
    assert {event["stream_id"] for event in fork} == {"fork"}
    assert '"Remember the word greengage"' in text_of(fork)


def test_failed_continuation_forgets_its_unstored_parent(stack: Stack) -> None:
    with stack.client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="kept for one try", store=False)
        parent = until_end(connection)[-1]["response"]["id"]
        connection.response.create(model="no-such-model", input="x", previous_response_id=parent)
        refused = receive(connection)
        connection.response.create(model=MODEL, input="again", previous_response_id=parent)
        retried = receive(connection)
    assert refused["error"]["code"] == "model_not_found" and refused["status"] == 404
    assert retried["error"]["code"] == "previous_response_not_found"


@pytest.mark.parametrize(
    ("message", "param", "code"),
    [
        ("not json", None, None),
        ('{"type": "session.update"}', "type", "invalid_value"),
        ('{"type": "response.steer", "previous_response_id": "resp_x", "input": []}', "type", "unsupported_value"),
        (json.dumps({"type": "response.create", "model": MODEL, "background": True}), "background",
         "unsupported_value"),
        (json.dumps({"type": "response.create", "model": MODEL, "stream_id": "no spaces"}), "stream_id",
         "invalid_stream_id"),
        (json.dumps({"type": "response.create", "model": MODEL, "temperature": "hot"}), "temperature",
         "invalid_type"),
    ],
)
def test_bad_command_gets_error_event_and_connection_stays_open(
    stack: Stack, message: str, param: str | None, code: str | None
) -> None:
    with _raw_socket(stack.base_url) as socket:
        socket.send(message)
        error = _next(socket)
        _send(socket, input="still there?")
        events = [_next(socket) for _ in range(2)]
    assert error["type"] == "error" and error["status"] == 400
    assert (error["error"]["type"], error["error"]["param"], error["error"]["code"]) == (
        "invalid_request_error", param, code)
    assert [event["type"] for event in events] == ["response.created", "response.in_progress"]


def test_message_larger_than_body_limit_closes_socket_as_too_big(stack: Stack) -> None:
    with _raw_socket(stack.base_url) as socket:
        _send(socket, input="x" * MAX_BODY_BYTES)
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=DEADLINE_S)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


def test_create_on_lane_past_limit_is_refused(stack: Stack) -> None:
    with _raw_socket(stack.base_url) as socket:
        for lane in range(33):
            _send(socket, input="hi", stream_id=f"lane-{lane}", generate=False)
        errors = []
        while len(errors) < 1:
            if (event := _next(socket))["type"] == "error":
                errors.append(event)
    assert errors[0]["error"]["code"] == "websocket_stream_limit_reached"


def test_create_beyond_waiting_limit_is_refused_on_one_lane(stack: Stack) -> None:
    """Commands wait behind a running one in bounded number: 300 waiting 1 MB creates had grown the API by
    350-380 MB. The one past the limit gets an error event; the connection stays open."""
    with _raw_socket(stack.base_url) as socket:
        _send(socket, input=LONG)  # runs; every later command of the lane waits for its end
        for _ in range(MAX_WAITING_COMMANDS + 1):
            _send(socket, input="hi", generate=False)
        while (event := _next(socket))["type"] != "error":
            pass
    assert event["status"] == 429 and event["error"]["code"] == "websocket_queue_full"


def test_large_command_waiting_behind_running_one_runs_as_sent(stack: Stack) -> None:
    """A waiting command over KEEP_PARSED_BYTES is held as its bytes and parsed again when its turn comes."""
    instructions = "Answer briefly. " * 4_000  # 64 kB
    assert len(instructions) > KEEP_PARSED_BYTES
    with _raw_socket(stack.base_url) as socket:
        _send(socket, input="tokens 200")
        _send(socket, input="hi", instructions=instructions, generate=False)
        ended = []
        while len(ended) < 2:
            if (event := _next(socket))["type"] in {"response.completed", "response.failed", "error"}:
                ended.append(event)
    assert [event["type"] for event in ended] == ["response.completed", "response.completed"]
    assert ended[1]["response"]["instructions"] == instructions


def test_command_of_too_many_items_gets_error_event_naming_their_number(stack: Stack) -> None:
    with _raw_socket(stack.base_url) as socket:
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": [{}] * 5_000}))
        event = _next(socket)
    assert event["type"] == "error" and event["error"]["code"] == "too_many_items"


def test_close_socket_cancels_running_response(stack: Stack) -> None:
    with _raw_socket(stack.base_url) as socket:
        _send(socket, input=LONG)
        response_id = _next(socket)["response"]["id"]
        while _next(socket)["type"] != "response.output_text.delta":
            pass
    assert _wait_for_status(stack, response_id) == "cancelled"


def test_stop_api_closes_socket_with_service_restart(stack: Stack) -> None:
    api, base_url = start_api_process(stack.settings, stack.logs / "stopped-api.log")
    try:
        with _raw_socket(base_url) as socket:
            _send(socket, input=LONG)
            response_id = _next(socket)["response"]["id"]
            _next(socket)
            api.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    socket.recv(timeout=DEADLINE_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
        api.wait(timeout=DEADLINE_S)  # stopped, not stuck waiting for the socket to close
    finally:
        stop_process(api)
    assert _wait_for_status(stack, response_id) == "cancelled"


def test_kill_api_cancels_the_response_its_socket_ran(stack: Stack) -> None:
    """As the socket's close does, and an API's stop (1012): a killed API process closes nothing, and the
    response ran to its end for nobody. Cancelled once its liveness key lapsed (``relays.py``)."""
    api, base_url = start_api_process(stack.settings, stack.logs / "killed-api.log")
    try:
        with _raw_socket(base_url) as socket:
            _send(socket, input="tokens 12000", max_output_tokens=12000)  # 30 s of answer
            response_id = _next(socket)["response"]["id"]
            while _next(socket)["type"] != "response.output_text.delta":
                pass
            api.send_signal(signal.SIGKILL)
            api.wait(timeout=DEADLINE_S)
    finally:
        stop_process(api)
    assert _wait_for_status(stack, response_id) == "cancelled"


def test_stop_api_closes_socket_of_several_lanes_once_and_logs_no_error(stack: Stack) -> None:
    """Every lane's relay learns that the hub stopped; the first closes the socket. Each other one's close was
    refused by Starlette and logged as an unhandled error, a traceback per lane."""
    log = stack.logs / "stopped-lanes-api.log"
    api, base_url = start_api_process(stack.settings, log)
    try:
        with _raw_socket(base_url) as socket:
            lanes = [f"lane-{n}" for n in range(4)]
            for lane in lanes:
                _send(socket, input=LONG, stream_id=lane)
            response_ids = set()
            while len(response_ids) < len(lanes):
                event = _next(socket)
                if event["type"] == "response.created":
                    response_ids.add(event["response"]["id"])
            api.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    socket.recv(timeout=DEADLINE_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
        api.wait(timeout=DEADLINE_S)
    finally:
        stop_process(api)
    assert {_wait_for_status(stack, response_id) for response_id in response_ids} == {"cancelled"}
    assert "Traceback" not in log.read_text()


def test_stop_api_closes_idle_socket_with_service_restart(stack: Stack) -> None:
    api, base_url = start_api_process(stack.settings, stack.logs / "stopped-idle-api.log")
    try:
        with _raw_socket(base_url) as socket:
            _send(socket, input="hi", generate=False)
            assert _next(socket)["type"] == "response.created"
            _next(socket)
            api.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=DEADLINE_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
        api.wait(timeout=DEADLINE_S)
    finally:
        stop_process(api)
