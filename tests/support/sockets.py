"""The Responses WebSocket (``WS /v1/responses``) as the official SDK opens it: ``client.responses.connect()``.

Every message read here is validated against the openai package's own ``ResponsesServerEvent`` union
(the SDK itself only constructs events, unchecked) and returned as its JSON object.
"""

from __future__ import annotations

import json
from typing import Any

from openai.resources.responses.responses import ResponsesConnection
from openai.types.responses.responses_server_event import ResponsesServerEvent
from pydantic import TypeAdapter

from oss_responses.statuses import TERMINAL_EVENT_TYPES

_SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ResponsesServerEvent)


def receive(connection: ResponsesConnection) -> dict[str, Any]:
    """The next message, checked against openai's server event types."""
    raw = connection.recv_bytes()
    _SERVER_EVENT.validate_json(raw)
    event: dict[str, Any] = json.loads(raw)
    return event


def until_end(connection: ResponsesConnection) -> list[dict[str, Any]]:
    """Messages up to and including the next terminal event or error (one lane's, when lanes run alone)."""
    events = []
    while True:
        events.append(event := receive(connection))
        if event["type"] in TERMINAL_EVENT_TYPES or event["type"] == "error":
            return events


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")
