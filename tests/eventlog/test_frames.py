from __future__ import annotations

import pytest

from oss_responses.eventlog import frame, parse_frame
from oss_responses.eventlog.frames import split_frames


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


def test_split_frames_returns_each_frame_of_a_joined_read(make_events) -> None:
    frames = [frame(event) for event in make_events(range(2, 6))]
    assert split_frames(b"".join(frames)) == frames


def test_split_frames_of_empty_read_is_none() -> None:
    assert split_frames(b"") == []
