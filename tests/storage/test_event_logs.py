from __future__ import annotations

from datetime import timedelta

import pytest

from oss_responses.storage import (
    Database,
    delete_response,
    get_event_log,
    insert_response,
    purge_expired_event_logs,
    save_event_log,
    utcnow,
)
from oss_responses.storage.event_logs import EventLog, pack_frames
from tests.support.rows import new_response

FRAMES = [b"event: a\ndata: {\"sequence_number\":%d}\n\n" % n for n in range(5)] + [b""]


def stored(db: Database) -> str:
    record = new_response()
    db.run(insert_response, record, [])
    return record.id


def test_get_event_log_returns_the_saved_frames_byte_for_byte(db: Database) -> None:
    response_id = stored(db)
    db.run(save_event_log, response_id, 0, FRAMES, utcnow() + timedelta(hours=1))

    event_log = db.run(get_event_log, response_id)

    assert event_log is not None and event_log.frames == FRAMES


def test_event_log_after_n_starts_at_event_n_plus_one(db: Database) -> None:
    response_id = stored(db)
    db.run(save_event_log, response_id, 2, FRAMES[:3], utcnow() + timedelta(hours=1))

    event_log = db.run(get_event_log, response_id)

    assert event_log is not None
    assert event_log.after(-1) == FRAMES[:3] and event_log.after(2) == FRAMES[1:3] and event_log.after(4) == []


def test_event_log_pages_after_n_hold_at_most_page_bytes_or_page_frames(db: Database) -> None:
    response_id = stored(db)
    frames = [b"data: %d\n\n" % n for n in range(10)]
    db.run(save_event_log, response_id, 0, frames, utcnow() + timedelta(hours=1))

    event_log = db.run(get_event_log, response_id)

    assert event_log is not None
    assert list(event_log.pages_after(3, page_frames=4)) == [frames[4:8], frames[8:]]
    assert list(event_log.pages_after(None, page_bytes=18)) == [frames[i : i + 2] for i in range(0, 10, 2)]
    assert list(event_log.pages_after(9)) == []


def test_event_log_whose_frame_lengths_disagree_with_its_frames_is_refused() -> None:
    blob = pack_frames(FRAMES)

    with pytest.raises(ValueError, match="does not match its frame lengths"):
        EventLog(0, len(FRAMES) - 1, blob).after(None)


def test_save_event_log_twice_keeps_one_log(db: Database) -> None:
    response_id = stored(db)
    db.run(save_event_log, response_id, 0, FRAMES[:1], utcnow() + timedelta(hours=1))
    db.run(save_event_log, response_id, 0, FRAMES, utcnow() + timedelta(hours=1))

    event_log = db.run(get_event_log, response_id)

    assert event_log is not None and event_log.frames == FRAMES


def test_get_event_log_ignores_an_expired_log(db: Database) -> None:
    response_id = stored(db)
    db.run(save_event_log, response_id, 0, FRAMES, utcnow() - timedelta(seconds=1))

    assert db.run(get_event_log, response_id) is None


def test_purge_expired_event_logs_deletes_only_expired_logs(db: Database) -> None:
    expired, live = stored(db), stored(db)
    db.run(save_event_log, expired, 0, FRAMES, utcnow() - timedelta(seconds=1))
    db.run(save_event_log, live, 0, FRAMES, utcnow() + timedelta(hours=1))

    assert db.run(purge_expired_event_logs) == 1
    assert db.run(get_event_log, live) is not None


def test_delete_response_deletes_its_event_log(db: Database) -> None:
    response_id = stored(db)
    db.run(save_event_log, response_id, 0, FRAMES, utcnow() + timedelta(hours=1))

    db.run(delete_response, response_id)

    assert db.run(get_event_log, response_id) is None
