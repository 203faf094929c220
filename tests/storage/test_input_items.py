from __future__ import annotations

import pytest
from support.rows import message_items, new_response

from oss_responses.errors import BadRequest
from oss_responses.storage import Database, insert_response, list_input_items

ITEMS = message_items(5)


@pytest.fixture
def response_id(db: Database) -> str:
    record = new_response()
    db.run(insert_response, record, ITEMS)
    db.run(insert_response, new_response(), message_items(2))  # another response's items stay out
    return record.id


def ids(items: list[dict]) -> list[str]:
    return [item["id"] for item in items]


def test_list_input_items_returns_newest_first_by_default(db: Database, response_id: str) -> None:
    items, has_more = db.run(list_input_items, response_id, limit=20)

    assert ids(items) == ["msg_4", "msg_3", "msg_2", "msg_1", "msg_0"] and has_more is False


def test_list_input_items_returns_input_order_when_asc(db: Database, response_id: str) -> None:
    items, has_more = db.run(list_input_items, response_id, limit=20, order="asc")

    assert items == ITEMS and has_more is False


def test_list_input_items_reports_more_when_limit_cuts(db: Database, response_id: str) -> None:
    items, has_more = db.run(list_input_items, response_id, limit=2, order="asc")

    assert ids(items) == ["msg_0", "msg_1"] and has_more is True


def test_list_input_items_reports_no_more_when_limit_fits_exactly(db: Database, response_id: str) -> None:
    items, has_more = db.run(list_input_items, response_id, limit=5)

    assert len(items) == 5 and has_more is False


def test_list_input_items_continues_after_item_asc(db: Database, response_id: str) -> None:
    items, has_more = db.run(list_input_items, response_id, after="msg_1", limit=2, order="asc")

    assert ids(items) == ["msg_2", "msg_3"] and has_more is True


def test_list_input_items_continues_after_item_desc(db: Database, response_id: str) -> None:
    items, has_more = db.run(list_input_items, response_id, after="msg_2", limit=5, order="desc")

    assert ids(items) == ["msg_1", "msg_0"] and has_more is False


def test_list_input_items_pages_through_everything(db: Database, response_id: str) -> None:
    seen: list[str] = []
    after, has_more = None, True
    while has_more:
        items, has_more = db.run(list_input_items, response_id, after=after, limit=2, order="asc")
        seen += ids(items)
        after = items[-1]["id"]

    assert seen == ids(ITEMS)


def test_list_input_items_rejects_unknown_after(db: Database, response_id: str) -> None:
    with pytest.raises(BadRequest) as raised:
        db.run(list_input_items, response_id, after="msg_missing", limit=2)

    assert raised.value.param == "after"


def test_list_input_items_returns_empty_page_for_response_without_items(db: Database) -> None:
    record = new_response()
    db.run(insert_response, record)

    assert db.run(list_input_items, record.id, limit=20) == ([], False)
