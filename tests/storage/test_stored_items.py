"""Stored items found by id (``find_stored_items``): what an ``item_reference`` may name."""

from __future__ import annotations

from typing import Any

from support.rows import message_items, new_response

from oss_responses.storage import (
    Database,
    delete_response,
    find_stored_items,
    insert_response,
    save_turn,
    transition,
)

REASONING = {"id": "rs_1", "type": "reasoning", "summary": [],
             "content": [{"type": "reasoning_text", "text": "think"}], "status": "completed"}
CALL = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}",
        "status": "completed"}


def _ended(db: Database, output: list[dict[str, Any]], *, store: bool = True, owner: str | None = None,
           inputs: list[dict[str, Any]] | None = None) -> str:
    record = new_response(store=store, owner=owner)
    db.run(insert_response, record, inputs or [])
    db.run(transition, record.id, from_statuses=("queued",), to_status="in_progress")
    final = {"id": record.id, "object": "response", "status": "completed", "output": output}
    db.run(save_turn, record.id, store=store, status="completed", response=final, output_messages=[])
    return record.id


def test_find_stored_items_finds_output_items_of_ended_response(db: Database) -> None:
    _ended(db, [REASONING, CALL])
    assert db.run(find_stored_items, ["rs_1", "fc_1", "rs_unknown"], None) == {"rs_1": REASONING, "fc_1": CALL}


def test_find_stored_items_finds_input_items_of_any_response(db: Database) -> None:
    [item] = message_items(1)
    db.run(insert_response, new_response(), [item])
    assert db.run(find_stored_items, [item["id"]], None) == {item["id"]: item}


def test_find_stored_items_skips_stored_references_to_the_item(db: Database) -> None:
    [item] = message_items(1)
    db.run(insert_response, new_response(), [item])
    db.run(insert_response, new_response(), [{"id": item["id"], "type": "item_reference"}])  # newer, same id
    assert db.run(find_stored_items, [item["id"]], None) == {item["id"]: item}


def test_find_stored_items_sees_only_owner_s_items(db: Database) -> None:
    _ended(db, [REASONING], owner="alice")
    assert db.run(find_stored_items, ["rs_1"], "bob") == {}
    assert db.run(find_stored_items, ["rs_1"], "alice") == {"rs_1": REASONING}


def test_find_stored_items_skips_response_not_stored(db: Database) -> None:
    _ended(db, [REASONING], store=False)
    assert db.run(find_stored_items, ["rs_1"], None) == {}


def test_find_stored_items_forgets_deleted_response(db: Database) -> None:
    response_id = _ended(db, [REASONING])
    db.run(delete_response, response_id)
    assert db.run(find_stored_items, ["rs_1"], None) == {}


def test_find_stored_items_takes_newest_of_input_items_sharing_an_id(db: Database) -> None:
    older, newer = ({"id": "msg_same", "type": "message", "role": "user",
                     "content": [{"type": "input_text", "text": text}]} for text in ("older", "newer"))
    db.run(insert_response, new_response(), [older])
    db.run(insert_response, new_response(), [newer])
    assert db.run(find_stored_items, ["msg_same"], None) == {"msg_same": newer}
