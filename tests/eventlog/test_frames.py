from __future__ import annotations

import pytest

from oss_responses.eventlog import frame, parse_frame


def test_frame_writes_event_name_and_json(make_events) -> None:
    (event,) = make_events(range(7, 8))
    data = frame(event)
    assert data == b"event: response.output_text.delta\ndata: " + event.model_dump_json().encode() + b"\n\n"


def test_parse_frame_returns_event_payload(make_events) -> None:
    (event,) = make_events(range(3, 4))
    assert parse_frame(frame(event)) == event.model_dump(mode="json")


def test_parse_frame_rejects_non_frame() -> None:
    with pytest.raises(ValueError):
        parse_frame(b"data: {}\n\n")
