"""The Responses WebSocket's messages (``api/socket_protocol.py``): commands parsed, frames turned into
messages that openai's server event types accept."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import ResponseCreatedEvent, ResponseErrorEvent
from openai.types.responses.responses_server_event import ResponsesServerEvent
from pydantic import TypeAdapter

from oss_responses.api.socket_protocol import error_message, event_message, parse_command
from oss_responses.errors import BadRequest, NotFound
from oss_responses.eventlog.frames import frame, is_terminal, keepalive_frame
from oss_responses.harmony.lifecycle import placeholder_response

SERVER_EVENT: TypeAdapter[object] = TypeAdapter(ResponsesServerEvent)
CREATED = frame(ResponseCreatedEvent(type="response.created", sequence_number=0,
                                     response=placeholder_response("resp_1", "gpt-oss-20b", 0.0)))


def test_parse_command_takes_envelope_off_create_body() -> None:
    command = parse_command({"type": "response.create", "model": "m", "input": "hi", "stream": True,
                             "background": False, "stream_id": "lane.1", "generate": False})
    assert command.body == {"model": "m", "input": "hi"}
    assert (command.stream_id, command.generate) == ("lane.1", False)


def test_parse_command_generates_by_default_on_default_lane() -> None:
    command = parse_command({"type": "response.create", "model": "m"})
    assert (command.stream_id, command.generate) == (None, True)


@pytest.mark.parametrize(
    ("message", "param", "code"),
    [
        ([], "type", None),
        ({"model": "m"}, "type", "invalid_value"),
        ({"type": "response.steer"}, "type", "unsupported_value"),
        ({"type": "response.create", "background": True}, "background", "unsupported_value"),
        ({"type": "response.create", "generate": "no"}, "generate", "invalid_value"),
        ({"type": "response.create", "stream_id": ""}, "stream_id", "invalid_stream_id"),
        ({"type": "response.create", "stream_id": "x" * 257}, "stream_id", "invalid_stream_id"),
        ({"type": "response.create", "stream_id": 7}, "stream_id", "invalid_stream_id"),
    ],
)
def test_parse_command_refuses_malformed_envelope(message: object, param: str, code: str | None) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_command(message)
    assert (refused.value.param, refused.value.code) == (param, code)


def test_event_message_is_frame_data_on_default_lane() -> None:
    message = event_message(CREATED, None)
    assert json.loads(message) == json.loads(CREATED.split(b"\ndata: ")[1])
    SERVER_EVENT.validate_json(message)


def test_event_message_adds_stream_id_of_named_lane() -> None:
    message = json.loads(event_message(CREATED, 'lane "a"'))
    assert message["stream_id"] == 'lane "a"' and message["type"] == "response.created"
    SERVER_EVENT.validate_python(message)


def test_is_terminal_only_for_terminal_events() -> None:
    assert not is_terminal(CREATED)
    assert is_terminal(CREATED.replace(b"event: response.created", b"event: response.completed"))


def test_error_message_carries_http_status_and_error_object() -> None:
    error = NotFound("gone", param="previous_response_id", code="previous_response_not_found")
    message = json.loads(error_message(error, "a"))
    assert message == {"type": "error", "status": 404, "stream_id": "a", "error": error.to_body()["error"]}
    SERVER_EVENT.validate_python(message)


def test_event_message_of_keepalive_is_a_message_of_its_lane() -> None:
    """A quiet lane's keepalive goes out as a message: a client's idle timer counts messages, not pings."""
    message = json.loads(event_message(keepalive_frame(3), "lane-1"))
    assert message == {"type": "keepalive", "sequence_number": 3, "stream_id": "lane-1"}
    assert not is_terminal(keepalive_frame(3))


def test_event_message_of_stream_error_nests_error_object() -> None:
    lost = frame(ResponseErrorEvent(type="error", sequence_number=7, code="event_log_lost", message="lost",
                                    param=None))
    message = json.loads(event_message(lost, "a"))
    assert message == {"type": "error", "sequence_number": 7, "stream_id": "a",
                       "error": {"type": "server_error", "code": "event_log_lost", "message": "lost", "param": None}}
    SERVER_EVENT.validate_python(message)
