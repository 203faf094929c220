"""SSE frames: the bytes a client receives for one event, built once by whoever writes the event.

The worker (or the API, for the opening events) frames each event as it appends it to the Redis
stream; the API relays those bytes untouched, so per-event work in the API is copying bytes.
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias

from openai.types.responses import ResponseStreamEvent

from oss_responses.statuses import TERMINAL_EVENT_TYPES
from oss_responses.wire import event_json

StreamEvent: TypeAlias = ResponseStreamEvent  # the log holds the openai package's own event types


_EVENT = b"event: "


def frame(event: StreamEvent) -> bytes:
    """``event: TYPE\\ndata: JSON\\n\\n`` for one event."""
    return _EVENT + event.type.encode() + b"\ndata: " + event_json(event).encode() + b"\n\n"


def keepalive_frame(sequence_number: int) -> bytes:
    """The event a quiet stream gets now and then: ``{"type": "keepalive", "sequence_number": N}``, as OpenAI
    sends on a long response (undocumented, and not among openai's event types; its SDKs pass it over). N is
    the last event's: a keepalive is this connection's, not the log's, and a client that resumes after it
    (``starting_after=N``) misses nothing. An SSE comment was skipped by clients, and so did not reset their
    idle timers: Codex CLI dropped a stream quiet for its ``stream_idle_timeout_ms`` and sent the request again,
    to the back of the queue."""
    return b'event: keepalive\ndata: {"type":"keepalive","sequence_number":%d}\n\n' % sequence_number


def frame_head(event_type: str) -> bytes:
    """The line a frame of ``event_type`` begins with (a prefix test is the cheapest check per frame)."""
    return _EVENT + event_type.encode() + b"\n"


_TERMINAL_HEADS = tuple(frame_head(kind) for kind in TERMINAL_EVENT_TYPES)


def is_terminal(data: bytes) -> bool:
    """The frame is a response's terminal event (``response.completed``, ``.failed``, ``.incomplete``)."""
    return data.startswith(_TERMINAL_HEADS)


def frame_type(data: bytes) -> str | None:
    """The event type a frame names (None: not a frame)."""
    head = data.partition(b"\n")[0]
    return head[len(_EVENT) :].decode() if head.startswith(_EVENT) else None


def split_frames(joined: bytes) -> list[bytes]:
    """The frames of a chunked read (frames joined; empty: none). A frame's data is one line of JSON, so the
    blank line that ends a frame occurs nowhere else."""
    return [part + b"\n\n" for part in joined.split(b"\n\n")[:-1]]


def parse_frame(data: bytes) -> dict[str, Any]:
    """The JSON payload of one frame (for tests and tools); checks that ``event:`` matches ``type``."""
    head, sep, rest = data.partition(b"\ndata: ")
    if not sep or not head.startswith(_EVENT) or not rest.endswith(b"\n\n"):
        raise ValueError(f"not an SSE frame: {data[:80]!r}")
    payload: dict[str, Any] = json.loads(rest[:-2])
    if payload.get("type") != head[len(_EVENT) :].decode():
        raise ValueError(f"frame event name differs from its type: {data[:80]!r}")
    return payload
