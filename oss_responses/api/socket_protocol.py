"""The Responses WebSocket's messages (``WS /v1/responses``): client commands in, events out.

A ``response.create`` command is a create body in an envelope: ``type``, an optional ``stream_id`` (the
lane it runs on: lanes run side by side, each one's responses one after another) and ``generate``
(false: a warm-up that prepares a conversation and produces no output). ``stream`` is implied, so it is
ignored; ``background`` is refused, as OpenAI refuses it over the socket.

Out go the events, each the JSON of its SSE frame's ``data`` (the bytes the worker framed, so the
socket and SSE carry the same events), with the command's ``stream_id`` added when it named one; and
``error`` events for commands that failed, with the HTTP status the same request would have got.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from openai.types.responses.responses_server_event import ResponseWsError, ResponseWsErrorError

from oss_responses.errors import BadRequest, ServiceError
from oss_responses.eventlog.frames import frame_head, parse_frame

CREATE = "response.create"
STEER = "response.steer"
_STREAM_ID = re.compile(r"[A-Za-z0-9_.\-]{1,256}")
_ENVELOPE = ("type", "stream_id", "generate", "stream", "background")
_DATA = b"\ndata: "
_ERROR_HEAD = frame_head("error")


@dataclass(frozen=True, slots=True)
class CreateCommand:
    body: dict[str, Any]  # the create body, without the envelope
    stream_id: str | None
    generate: bool


def parse_command(message: Any) -> CreateCommand:
    """A client message (parsed JSON) as a create command; a :class:`BadRequest` for anything else."""
    if not isinstance(message, dict):
        raise BadRequest("A WebSocket message must be a JSON object with a 'type'.", param="type")
    kind = message.get("type")
    if kind == STEER:
        raise BadRequest("response.steer is not supported by this service: send the input with the next "
                         "response.create instead.", param="type", code="unsupported_value")
    if kind != CREATE:
        raise BadRequest(f"Unknown client event type {kind!r}: expected 'response.create'.", param="type",
                         code="invalid_value")
    if message.get("background") is True:
        raise BadRequest("background is not supported over WebSocket: use POST /v1/responses.",
                         param="background", code="unsupported_value")
    generate = message.get("generate", True)
    if not isinstance(generate, bool):
        raise BadRequest("Invalid value for 'generate': expected a boolean.", param="generate", code="invalid_value")
    body = {key: value for key, value in message.items() if key not in _ENVELOPE}
    return CreateCommand(body=body, stream_id=stream_id_of(message), generate=generate)


def stream_id_of(message: dict[str, Any]) -> str | None:
    stream_id = message.get("stream_id")
    if stream_id is None:
        return None
    if not isinstance(stream_id, str) or not _STREAM_ID.fullmatch(stream_id):
        raise BadRequest("Invalid 'stream_id': 1 to 256 ASCII letters, digits, '_', '-' or '.'.",
                         param="stream_id", code="invalid_stream_id")
    return stream_id


def event_message(frame: bytes, stream_id: str | None) -> str:
    """The socket message of one SSE frame: its data, with ``stream_id`` added for a named lane. An
    ``error`` event (a lost stream's last, ``api/relay.py``) is reshaped: the socket's error event nests
    the error object, where SSE's carries its fields at the top."""
    if frame.startswith(_ERROR_HEAD):
        return _stream_error_message(parse_frame(frame), stream_id)
    data = frame[frame.index(_DATA) + len(_DATA) : -2]
    if stream_id is None:
        return data.decode()
    # The data is one JSON object written by json: its last byte closes it.
    return data[:-1].decode() + ',"stream_id":' + json.dumps(stream_id) + "}"


def _stream_error_message(payload: dict[str, Any], stream_id: str | None) -> str:
    error = ResponseWsErrorError(type="server_error", code=payload.get("code"), message=payload.get("message", ""),
                                 param=payload.get("param"))
    event = ResponseWsError(type="error", sequence_number=payload.get("sequence_number"), error=error)
    return _on_lane(event, stream_id)


def error_message(error: ServiceError, stream_id: str | None) -> str:
    """An ``error`` event: the error object a request would get over HTTP, and that request's status."""
    body = ResponseWsErrorError.model_validate(error.to_body()["error"])
    return _on_lane(ResponseWsError(type="error", status=error.status_code, error=body), stream_id)


def _on_lane(event: ResponseWsError, stream_id: str | None) -> str:
    """``event`` as a message of lane ``stream_id`` (named lanes' events carry it). Only the fields given
    are sent: an error of a request has no ``sequence_number``, one of a stream no ``status``."""
    if stream_id is not None:
        event.stream_id = stream_id
    return event.model_dump_json(exclude_unset=True)
