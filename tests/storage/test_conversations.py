"""Conversations' storage: appends in order, one id per conversation, pages, deletes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from support.rows import new_response

from oss_responses.errors import BadRequest
from oss_responses.storage import (
    ConversationLocked,
    Database,
    ResponseRecord,
    get_response,
    insert_accepted,
    insert_response,
)
from oss_responses.storage.conversations import (
    ConversationRecord,
    DuplicateItem,
    add_items,
    append_turn,
    delete_conversation,
    delete_item,
    get_conversation,
    get_item,
    insert_conversation,
    items_through,
    list_items,
)
from oss_responses.storage.responses import count_running_in_conversation


def _item(item_id: str) -> dict[str, str]:
    return {"id": item_id, "type": "message"}


def _ids(db: Database, conversation_id: str, **page: object) -> list[str]:
    items, _ = db.run(list_items, conversation_id, limit=100, **page)  # type: ignore[arg-type]
    return [item["id"] for item in items]


def _conversation(db: Database, owner: str | None = None, items: tuple[str, ...] = ()) -> str:
    record = ConversationRecord(id=f"conv_{len(items)}_{id(db)}_{owner}", owner=owner)
    db.run(insert_conversation, record, [_item(item_id) for item_id in items])
    return record.id


def test_add_items_appends_after_last_item(db: Database) -> None:
    conversation_id = _conversation(db, items=("a", "b"))
    db.run(add_items, conversation_id, [_item("c"), _item("d")])
    assert _ids(db, conversation_id, order="asc") == ["a", "b", "c", "d"]


def test_items_through_reads_all_items_and_where_they_end(db: Database) -> None:
    conversation_id = _conversation(db, items=("msg_a", "msg_b"))
    items, through = db.run(items_through, conversation_id)
    assert ([item["id"] for item in items], through) == (["msg_a", "msg_b"], 1)


def test_items_through_position_leaves_later_and_deleted_items_out(db: Database) -> None:
    conversation_id = _conversation(db, items=("msg_a", "msg_b", "msg_c"))
    db.run(add_items, conversation_id, [_item("msg_d")])
    db.run(delete_item, conversation_id, "msg_a")
    items, through = db.run(items_through, conversation_id, 2)
    assert ([item["id"] for item in items], through) == (["msg_b", "msg_c"], 2)


def test_items_through_position_leaves_out_item_added_after_the_last_was_deleted(db: Database) -> None:
    # A response recorded position 1; its last item deleted, one added since must not take position 1
    # (the race probe: a queued response then answered with the item added after it).
    conversation_id = _conversation(db, items=("msg_a", "msg_b"))
    db.run(delete_item, conversation_id, "msg_b")
    db.run(add_items, conversation_id, [_item("msg_intruder")])
    items, _ = db.run(items_through, conversation_id, 1)
    assert [item["id"] for item in items] == ["msg_a"]


def test_insert_accepted_in_conversation_whose_last_item_was_replaced_since_it_was_planned_refuses(
    db: Database,
) -> None:
    conversation = _conversation(db, items=("a",))
    db.run(delete_item, conversation, "a")
    db.run(add_items, conversation, [_item("b")])
    with pytest.raises(ConversationLocked):
        db.run(insert_accepted, _in_conversation(conversation, 0), [])


def test_items_through_of_empty_conversation_ends_before_first_position(db: Database) -> None:
    assert db.run(items_through, _conversation(db)) == ([], -1)


def test_items_through_of_deleted_conversation_is_none(db: Database) -> None:
    conversation_id = _conversation(db, items=("msg_a",))
    db.run(delete_conversation, conversation_id)
    assert db.run(items_through, conversation_id, 0) is None


def test_add_items_concurrently_keeps_every_item(db: Database) -> None:
    conversation_id = _conversation(db)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: db.run(add_items, conversation_id, [_item(f"{n}-1"), _item(f"{n}-2")]), range(16)))
    ids = _ids(db, conversation_id, order="asc")
    assert sorted(ids) == sorted(f"{n}-{k}" for n in range(16) for k in (1, 2))
    assert all(ids.index(f"{n}-1") + 1 == ids.index(f"{n}-2") for n in range(16))  # each batch stays together


def test_add_items_with_taken_id_adds_nothing(db: Database) -> None:
    conversation_id = _conversation(db, items=("a",))
    with pytest.raises(DuplicateItem):
        db.run(add_items, conversation_id, [_item("b"), _item("a")])
    assert _ids(db, conversation_id) == ["a"]


def test_same_item_id_may_be_in_two_conversations(db: Database) -> None:
    first, second = _conversation(db, "x", ("a",)), _conversation(db, "y", ("a",))
    assert db.run(get_item, first, "a") == db.run(get_item, second, "a") == _item("a")


def test_list_items_after_item_in_either_order(db: Database) -> None:
    conversation_id = _conversation(db, items=("a", "b", "c"))
    assert _ids(db, conversation_id, order="asc", after="a") == ["b", "c"]
    assert _ids(db, conversation_id, order="desc", after="c") == ["b", "a"]
    with pytest.raises(BadRequest):
        _ids(db, conversation_id, after="z")


def test_get_conversation_of_other_owner_is_none(db: Database) -> None:
    conversation_id = _conversation(db, "alice")
    assert db.run(get_conversation, conversation_id, "bob") is None
    assert db.run(get_conversation, conversation_id, "alice") is not None
    assert db.run(get_conversation, conversation_id, None) is not None  # open mode sees everything


def test_delete_item_reports_whether_it_was_there(db: Database) -> None:
    conversation_id = _conversation(db, items=("a", "b"))
    assert db.run(delete_item, conversation_id, "a") is True
    assert db.run(delete_item, conversation_id, "a") is False
    assert _ids(db, conversation_id) == ["b"]


def test_delete_conversation_reports_whether_it_was_there(db: Database) -> None:
    # Of two concurrent DELETEs, both had loaded it: only the one that deleted it answers deleted.
    conversation_id = _conversation(db, items=("msg_a",))
    assert db.run(delete_conversation, conversation_id) is True
    assert db.run(delete_conversation, conversation_id) is False


def test_delete_conversation_deletes_its_items(db: Database) -> None:
    conversation_id = _conversation(db, items=("a",))
    db.run(delete_conversation, conversation_id)
    assert db.run(get_conversation, conversation_id, None) is None
    assert db.run(get_item, conversation_id, "a") is None


def _response_with_input(db: Database, response_id: str, inputs: list[dict[str, str]]) -> None:
    record = ResponseRecord(id=response_id, model="m", status="queued", background=True, store=True, request={},
                            response={})
    db.run(insert_response, record, inputs)


def test_append_turn_adds_input_items_then_output_items(db: Database) -> None:
    conversation_id = _conversation(db, items=("a",))
    _response_with_input(db, "resp_1", [_item("in")])
    db.run(append_turn, conversation_id, "resp_1", [_item("out")])
    assert _ids(db, conversation_id, order="asc") == ["a", "in", "out"]


def test_append_turn_skips_items_already_there(db: Database) -> None:
    conversation_id = _conversation(db, items=("a",))
    _response_with_input(db, "resp_1", [_item("a"), _item("in")])
    db.run(append_turn, conversation_id, "resp_1", [_item("out"), _item("out")])
    assert _ids(db, conversation_id, order="asc") == ["a", "in", "out"]


def test_append_turn_to_deleted_conversation_adds_nothing(db: Database) -> None:
    conversation_id = _conversation(db)
    db.run(delete_conversation, conversation_id)
    _response_with_input(db, "resp_1", [_item("in")])
    db.run(append_turn, conversation_id, "resp_1", [_item("out")])
    assert db.run(get_item, conversation_id, "in") is None


def test_append_turn_adds_the_item_a_reference_names(db: Database) -> None:
    conversation_id = _conversation(db)
    _response_with_input(db, "resp_0", [{"id": "x", "type": "message", "role": "user"}])
    _response_with_input(db, "resp_1", [{"id": "x", "type": "item_reference"}])
    db.run(append_turn, conversation_id, "resp_1", [])
    assert db.run(get_item, conversation_id, "x") == {"id": "x", "type": "message", "role": "user"}


def _in_conversation(conversation_id: str, through: int, **overrides: object) -> ResponseRecord:
    return new_response(conversation_id=conversation_id, conversation_through=through, **overrides)


def test_insert_accepted_in_conversation_with_one_running_refuses_and_inserts_nothing(db: Database) -> None:
    conversation = _conversation(db, items=("a",))
    db.run(insert_accepted, _in_conversation(conversation, 0), [])
    refused = _in_conversation(conversation, 0)
    with pytest.raises(ConversationLocked):
        db.run(insert_accepted, refused, [{"id": "msg_1", "type": "message"}])
    assert db.run(get_response, refused.id) is None


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled", "incomplete"])
def test_insert_accepted_in_conversation_after_one_ended_accepts(db: Database, status: str) -> None:
    conversation = _conversation(db, items=("a",))
    db.run(insert_response, _in_conversation(conversation, 0, status=status))
    accepted = _in_conversation(conversation, 0)
    db.run(insert_accepted, accepted, [])
    assert db.run(get_response, accepted.id) is not None


def test_insert_accepted_in_conversation_grown_since_it_was_planned_refuses(db: Database) -> None:
    conversation = _conversation(db, items=("a",))
    db.run(add_items, conversation, [_item("b")])  # a turn that ended meanwhile, or an item added by hand
    with pytest.raises(ConversationLocked):
        db.run(insert_accepted, _in_conversation(conversation, 0), [])
    db.run(insert_accepted, _in_conversation(conversation, 1), [])


def test_insert_accepted_in_other_conversation_accepts(db: Database) -> None:
    first, second = _conversation(db, items=("a",)), _conversation(db, owner="other", items=("a",))
    db.run(insert_accepted, _in_conversation(first, 0), [])
    db.run(insert_accepted, _in_conversation(second, 0), [])
    assert db.run(count_running_in_conversation, second) == 1


def test_insert_accepted_in_one_conversation_accepts_one_under_concurrency(db: Database) -> None:
    conversation = _conversation(db, items=("a",))

    def insert(_: int) -> bool:
        try:
            db.run(insert_accepted, _in_conversation(conversation, 0), [])
        except ConversationLocked:
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        accepted = sum(pool.map(insert, range(16)))
    assert accepted == 1
    assert db.run(count_running_in_conversation, conversation) == 1
