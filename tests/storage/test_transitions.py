from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.rows import new_response

from oss_responses.storage import (
    ACTIVE_STATUSES,
    Database,
    Status,
    cancel_queued,
    get_response,
    insert_response,
    save_turn,
    transition,
)

FINAL = {"id": "resp_x", "object": "response", "status": "completed", "output": [{"type": "message"}]}
OUTPUT_MESSAGES = [{"role": "assistant", "channel": "final", "content": [{"type": "text", "text": "hi"}]}]


def test_transition_changes_status_when_current_status_matches(db: Database) -> None:
    record = new_response()
    db.run(insert_response, record)

    changed = db.run(transition, record.id, from_statuses=["queued"], to_status="in_progress")

    stored = db.run(get_response, record.id)
    assert changed is True and stored is not None and stored.status == "in_progress"
    assert stored.updated_at is not None and stored.updated_at >= record.created_at


def test_transition_leaves_row_when_current_status_differs(db: Database) -> None:
    record = new_response(status="completed")
    db.run(insert_response, record)

    changed = db.run(transition, record.id, from_statuses=ACTIVE_STATUSES, to_status="cancelled")

    stored = db.run(get_response, record.id)
    assert changed is False and stored is not None and stored.status == "completed"


def test_transition_returns_false_when_unknown(db: Database) -> None:
    assert db.run(transition, "resp_missing", from_statuses=["queued"], to_status="in_progress") is False


def test_transition_sets_given_fields(db: Database) -> None:
    record = new_response()
    db.run(insert_response, record)

    db.run(transition, record.id, from_statuses=["queued"], to_status="in_progress", state={"lease": "w1"})

    stored = db.run(get_response, record.id)
    assert stored is not None and stored.state == {"lease": "w1"}


def test_transition_rejects_unknown_field(db: Database) -> None:
    with pytest.raises(TypeError):
        db.run(transition, "resp_x", from_statuses=["queued"], to_status="in_progress", colour="red")


def test_transition_lets_exactly_one_concurrent_writer_win(db: Database) -> None:
    record = new_response(status="in_progress")
    db.run(insert_response, record)
    targets: list[Status] = ["cancelled", "completed", "failed", "incomplete"] * 3
    start = threading.Barrier(len(targets))

    def end_response(status: Status) -> bool:
        start.wait()
        return db.run(transition, record.id, from_statuses=ACTIVE_STATUSES, to_status=status)

    with ThreadPoolExecutor(len(targets)) as pool:
        outcomes = list(pool.map(end_response, targets))

    stored = db.run(get_response, record.id)
    assert outcomes.count(True) == 1
    assert stored is not None and stored.status == targets[outcomes.index(True)]


def test_save_turn_stores_final_response(db: Database) -> None:
    record = new_response(status="in_progress")
    db.run(insert_response, record)

    saved = db.run(
        save_turn, record.id, status="completed", response=FINAL, output_messages=OUTPUT_MESSAGES,
        function_calls={"call_1": "get_weather"}, input_messages=[{"role": "user", "content": []}],
    )

    stored = db.run(get_response, record.id)
    assert saved is True and stored is not None
    assert (stored.status, stored.response, stored.output_messages) == ("completed", FINAL, OUTPUT_MESSAGES)
    assert stored.function_calls == {"call_1": "get_weather"}
    assert stored.input_messages == [{"role": "user", "content": []}]
    assert stored.completed_at is not None and stored.completed_at.tzinfo is not None


def test_save_turn_keeps_input_messages_when_not_given(db: Database) -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    record = new_response(status="in_progress", input_messages=messages)
    db.run(insert_response, record)

    db.run(save_turn, record.id, status="completed", response=FINAL, output_messages=OUTPUT_MESSAGES)

    stored = db.run(get_response, record.id)
    assert stored is not None and stored.input_messages == messages


def test_save_turn_stores_error_of_failed_response(db: Database) -> None:
    record = new_response(status="in_progress")
    db.run(insert_response, record)
    error = {"code": "server_error", "message": "worker lost"}

    db.run(save_turn, record.id, status="failed", response=FINAL | {"status": "failed"}, output_messages=[],
           error=error)

    stored = db.run(get_response, record.id)
    assert stored is not None and stored.status == "failed" and stored.error == error


def test_save_turn_applies_only_once(db: Database) -> None:
    record = new_response(status="in_progress")
    db.run(insert_response, record)
    db.run(save_turn, record.id, status="completed", response=FINAL, output_messages=OUTPUT_MESSAGES)

    again = db.run(save_turn, record.id, status="failed", response={"status": "failed"}, output_messages=[])

    stored = db.run(get_response, record.id)
    assert again is False and stored is not None
    assert (stored.status, stored.response) == ("completed", FINAL)


def test_save_turn_leaves_cancelled_response(db: Database) -> None:
    record = new_response(status="in_progress")
    db.run(insert_response, record)
    db.run(transition, record.id, from_statuses=ACTIVE_STATUSES, to_status="cancelled")

    saved = db.run(save_turn, record.id, status="completed", response=FINAL, output_messages=OUTPUT_MESSAGES)

    stored = db.run(get_response, record.id)
    assert saved is False and stored is not None and stored.status == "cancelled"
    assert stored.output_messages == []


def test_save_turn_rejects_active_status(db: Database) -> None:
    with pytest.raises(ValueError):
        db.run(save_turn, "resp_x", status="in_progress", response=FINAL, output_messages=[])


def test_save_turn_deletes_response_when_store_is_false(db: Database) -> None:
    record = new_response(status="in_progress")
    db.run(insert_response, record)

    saved = db.run(save_turn, record.id, store=False, status="completed", response=FINAL, output_messages=[])

    assert saved is True and db.run(get_response, record.id) is None


def test_save_turn_keeps_ended_response_when_store_is_false(db: Database) -> None:
    record = new_response(status="cancelled")
    db.run(insert_response, record)

    saved = db.run(save_turn, record.id, store=False, status="completed", response=FINAL, output_messages=[])

    stored = db.run(get_response, record.id)
    assert saved is False and stored is not None and stored.status == "cancelled"


def test_cancel_queued_marks_response_and_its_json_cancelled(db: Database) -> None:
    record = new_response()
    db.run(insert_response, record)

    cancelled = db.run(cancel_queued, record.id, {"id": record.id, "status": "queued"})

    stored = db.run(get_response, record.id)
    assert cancelled is True and stored is not None and stored.status == "cancelled"
    assert stored.response == {"id": record.id, "status": "cancelled"} and stored.completed_at is not None


def test_cancel_queued_leaves_response_a_worker_took(db: Database) -> None:
    record = new_response(status="in_progress")
    db.run(insert_response, record)

    cancelled = db.run(cancel_queued, record.id, {"id": record.id, "status": "queued"})

    stored = db.run(get_response, record.id)
    assert cancelled is False and stored is not None and stored.status == "in_progress"
