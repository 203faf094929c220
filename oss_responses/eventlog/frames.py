"""SSE frames: the bytes a client receives for one event, built once by whoever writes the event.

The worker (or the API, for the opening events) frames each event as it appends it to the Redis
stream; the API relays those bytes untouched, so per-event work in the API is copying bytes.
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias

from openai.types.responses import ResponseStreamEvent

from oss_responses.wire import event_json

StreamEvent: TypeAlias = ResponseStreamEvent  # the log holds the openai package's own event types


def frame(event: StreamEvent) -> bytes:
    """``event: TYPE\\ndata: JSON\\n\\n`` for one event."""
    return b"event: " + event.type.encode() + b"\ndata: " + event_json(event).encode() + b"\n\n"


def parse_frame(data: bytes) -> dict[str, Any]:
    """The JSON payload of one frame (for tests and tools); checks that ``event:`` matches ``type``."""
    head, sep, rest = data.partition(b"\ndata: ")
    if not sep or not head.startswith(b"event: ") or not rest.endswith(b"\n\n"):
        raise ValueError(f"not an SSE frame: {data[:80]!r}")
    payload: dict[str, Any] = json.loads(rest[:-2])
    if payload.get("type") != head[len(b"event: ") :].decode():
        raise ValueError(f"frame event name differs from its type: {data[:80]!r}")
    return payload
