"""A response's event stream in Redis, as the worker tests read it: its events (from SQL once archived),
following it until an event or its end, and the checks every stream gets."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import redis as redis_lib
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from oss_responses import redis_keys
from oss_responses.eventlog.frames import parse_frame
from oss_responses.statuses import TERMINAL_EVENT_TYPES
from oss_responses.storage import Database, get_event_log, get_response
from support.sdk import without_parsed

_events = TypeAdapter(ResponseStreamEvent)
# Where events_of reads a finished response's archived log: the database of the latest worker_settings().
_archive_database_url: str | None = None


def read_archives_from(database_url: str) -> None:
    global _archive_database_url
    _archive_database_url = database_url


def stream_entries(redis: redis_lib.Redis, response_id: str) -> list[tuple[str, dict[bytes, bytes]]]:
    return [(i.decode(), f) for i, f in redis.xrange(redis_keys.events(response_id))]


def events_of(redis: redis_lib.Redis, response_id: str) -> list[dict[str, Any]]:
    """Every event of the response: from its stream, or from SQL once the stream was archived."""
    entries = stream_entries(redis, response_id)
    if entries and b"archived" in entries[-1][1]:
        return [parse_frame(data) for data in archived_frames(response_id)]
    return [parse_frame(fields[b"f"]) for _, fields in entries if b"f" in fields]


def archived_frames(response_id: str) -> list[bytes]:
    assert _archive_database_url is not None, "read_archives_from() (worker_settings() calls it) names the database"
    db = Database(_archive_database_url)
    try:
        event_log = db.run(get_event_log, response_id)
    finally:
        db.dispose()
    assert event_log is not None, f"the event log of {response_id} was archived but is not in SQL"
    return event_log.frames


def is_closed(redis: redis_lib.Redis, response_id: str) -> bool:
    entries = stream_entries(redis, response_id)
    return bool(entries) and b"end" in entries[-1][1]


def _follow(redis: redis_lib.Redis, response_id: str, timeout: float) -> Iterator[dict[bytes, bytes]]:
    """The fields of each stream entry as it arrives (blocking reads), until ``timeout``."""
    deadline = time.monotonic() + timeout
    last = "0-0"
    key = redis_keys.events(response_id)
    while time.monotonic() < deadline:
        for _, entries in redis.xread({key: last}, block=200) or []:
            for entry_id, fields in entries:
                last = entry_id.decode()
                yield fields


def wait_for_end(redis: redis_lib.Redis, response_id: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Follow the stream (blocking reads) until its end marker; every event, in order."""
    for fields in _follow(redis, response_id, timeout):
        if b"end" in fields:
            return events_of(redis, response_id)
    raise TimeoutError(f"the stream of {response_id} did not end within {timeout}s")


def wait_for_event(redis: redis_lib.Redis, response_id: str, event_type: str, timeout: float = 20.0) -> None:
    for fields in _follow(redis, response_id, timeout):
        if b"f" in fields and parse_frame(fields[b"f"])["type"] == event_type:
            return
    raise TimeoutError(f"no {event_type} for {response_id} within {timeout}s")


def assert_contiguous(events: list[dict[str, Any]]) -> None:
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def story_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def assert_one_story(events: list[dict[str, Any]], db: Database, response_id: str) -> None:
    """Contiguous, one terminal event, deltas on their item's id, and the stream's final object is SQL's."""
    assert_contiguous(events)
    assert [e["type"] for e in events if e["type"] in TERMINAL_EVENT_TYPES] == ["response.completed"]
    added = {e["item"]["id"] for e in events if e["type"] == "response.output_item.added"}
    assert {e["item_id"] for e in events if "delta" in e} <= added
    done = [e["item"]["id"] for e in events if e["type"] == "response.output_item.done"]
    assert sorted(done) == sorted(added)
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "completed"
    assert record.response["output"] == events[-1]["response"]["output"]


def assert_cancelled_story(events: list[dict[str, Any]], db: Database, response_id: str) -> None:
    """Contiguous, no terminal event (a cancel ends the stream with its end marker alone), cancelled in SQL."""
    assert_contiguous(events)
    assert [e["type"] for e in events if e["type"] in TERMINAL_EVENT_TYPES] == []
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "cancelled"
    assert record.response["status"] == "cancelled"


def check_stream(events: list[dict[str, Any]], response: dict[str, Any]) -> None:
    """Every event is one of openai's; numbering and indices hold; the SDK rebuilds the stored output."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    models = [_events.validate_python(event) for event in events]
    added = [e.output_index for e in models if e.type == "response.output_item.added"]
    done = [e.output_index for e in models if e.type == "response.output_item.done"]
    assert added == list(range(len(added))) == done
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for model in models:
        state.handle_event(model)
    if response["status"] == "cancelled":  # OpenAI defines no terminal event for it
        return
    rebuilt = state._completed_response
    assert rebuilt is not None
    assert [without_parsed(item.to_dict()) for item in rebuilt.output] == response["output"]
