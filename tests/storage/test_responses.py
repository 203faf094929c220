from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from sqlalchemy.exc import IntegrityError
from support.rows import message_items, new_response

from oss_responses.storage import (
    Database,
    delete_response,
    get_chain,
    get_owned_response,
    get_response,
    insert_response,
    list_in_progress_ids,
    list_input_items,
    warm_statements,
)


def test_get_owned_response_reads_only_its_owner_s(db: Database) -> None:
    record = new_response(owner="alpha")
    db.run(insert_response, record)
    assert db.run(get_owned_response, record.id, "alpha") == db.run(get_response, record.id)
    assert db.run(get_owned_response, record.id, None) == db.run(get_response, record.id)
    assert db.run(get_owned_response, record.id, "beta") is None


def test_get_response_returns_inserted_record(db: Database) -> None:
    created = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    record = new_response(
        created_at=created,
        input_messages=[{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
        function_calls={"call_1": "get_weather"},
        state={"pending_approval": "mcpr_1"},
    )
    db.run(insert_response, record)

    stored = db.run(get_response, record.id)

    assert stored is not None
    assert stored == dataclasses.replace(record, updated_at=created)


def test_get_response_keeps_nul_characters_in_documents(db: Database) -> None:
    text = "before\x00after"
    record = new_response(
        output_messages=[{"role": "assistant", "content": [{"type": "text", "text": text}]}],
        response={"id": "resp_nul", "output_text": text},
    )
    items = [{"id": "msg_nul", "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]
    db.run(insert_response, record, items)

    stored = db.run(get_response, record.id)
    stored_items, _ = db.run(list_input_items, record.id, after=None, limit=10, order="asc")

    assert stored is not None and stored.output_messages[0]["content"][0]["text"] == text
    assert stored.response["output_text"] == text and stored_items[0]["content"][0]["text"] == text


def test_get_response_keeps_null_json_as_none(db: Database) -> None:
    record = new_response()
    db.run(insert_response, record)

    stored = db.run(get_response, record.id)

    assert stored is not None and stored.error is None and stored.state is None and stored.completed_at is None


def test_get_response_returns_none_when_unknown(db: Database) -> None:
    assert db.run(get_response, "resp_missing") is None


def test_insert_response_rejects_duplicate_id(db: Database) -> None:
    record = new_response()
    db.run(insert_response, record)

    with pytest.raises(IntegrityError):
        db.run(insert_response, record)


def test_insert_response_leaves_nothing_when_an_item_is_invalid(db: Database) -> None:
    record = new_response()

    with pytest.raises(KeyError):
        db.run(insert_response, record, [{"type": "message"}])  # an item without an id

    assert db.run(get_response, record.id) is None


def test_insert_response_rejects_unknown_previous_response(db: Database) -> None:
    with pytest.raises(IntegrityError):
        db.run(insert_response, new_response(previous_response_id="resp_missing"))


def test_insert_response_stores_items_in_order(db: Database) -> None:
    record = new_response()
    items = message_items(3)
    db.run(insert_response, record, items)

    stored, has_more = db.run(list_input_items, record.id, order="asc", limit=10)

    assert stored == items and has_more is False


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_list_input_items_after_id_held_twice_moves_on(db: Database, order: str) -> None:
    """Input stored before an id given twice was refused: the cursor took the first copy, and paging never ended."""
    record = new_response()
    first, second, third = message_items(3)
    db.run(insert_response, record, [first, {**second, "id": first["id"]}, third])
    seen: list[str] = []
    after = None
    for _ in range(5):
        page, has_more = db.run(list_input_items, record.id, after=after, limit=1, order=order)
        seen += [item["content"][0]["text"] for item in page]
        if not has_more:
            break
        after = page[-1]["id"]
    assert not has_more and len(seen) <= 3


def test_get_chain_returns_ancestors_oldest_first(db: Database) -> None:
    first = new_response()
    second = new_response(previous_response_id=first.id)
    third = new_response(previous_response_id=second.id)
    unrelated = new_response()
    for record in (first, second, third, unrelated):
        db.run(insert_response, record)

    chain = db.run(get_chain, third.id)

    assert [r.id for r in chain] == [first.id, second.id, third.id]


def test_get_chain_returns_only_the_response_without_previous(db: Database) -> None:
    record = new_response()
    db.run(insert_response, record)

    assert [r.id for r in db.run(get_chain, record.id)] == [record.id]


def test_get_chain_returns_empty_when_unknown(db: Database) -> None:
    assert db.run(get_chain, "resp_missing") == []


def test_get_chain_of_owner_is_empty_for_another_owner_s_response(db: Database) -> None:
    """Not walked: another owner's id is refused as quickly as an unknown one. Its chain was loaded whole and
    then refused, so the time to refuse it told how long that owner's conversation was."""
    first = new_response(owner="alpha")
    second = new_response(owner="alpha", previous_response_id=first.id)
    for record in (first, second):
        db.run(insert_response, record)

    assert db.run(get_chain, second.id, "beta") == []
    assert [r.id for r in db.run(get_chain, second.id, "alpha")] == [first.id, second.id]


def test_delete_response_cascades_to_input_items(db: Database) -> None:
    record = new_response()
    db.run(insert_response, record, message_items(2))

    assert db.run(delete_response, record.id) is True

    assert db.run(get_response, record.id) is None
    assert db.run(list_input_items, record.id, limit=10) == ([], False)


def test_delete_response_unlinks_later_turns(db: Database) -> None:
    first = new_response()
    second = new_response(previous_response_id=first.id)
    db.run(insert_response, first)
    db.run(insert_response, second)

    db.run(delete_response, first.id)

    stored = db.run(get_response, second.id)
    assert stored is not None and stored.previous_response_id is None


def test_delete_response_returns_false_when_unknown(db: Database) -> None:
    assert db.run(delete_response, "resp_missing") is False


def test_list_in_progress_ids_returns_only_in_progress(db: Database) -> None:
    records = [new_response(status=s) for s in ("queued", "in_progress", "completed", "in_progress")]
    for record in records:
        db.run(insert_response, record)

    assert db.run(list_in_progress_ids) == [records[1].id, records[3].id]


def test_warm_statements_leaves_every_response_as_it_was(db: Database) -> None:
    record = new_response()
    db.run(insert_response, record)

    db.run(warm_statements)

    assert db.run(get_response, record.id) == db.run(get_chain, record.id)[0] == dataclasses.replace(
        record, updated_at=record.created_at)
