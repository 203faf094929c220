"""``/v1/conversations``: conversations and their items, through the openai SDK."""

from __future__ import annotations

import httpx2
import openai
import pytest
from openai import OpenAI
from sqlalchemy import select
from sqlalchemy.orm import Session
from support import MODEL
from support.api_server import ApiServer

from oss_responses.storage import ResponseRow

USER = {"type": "message", "role": "user", "content": "Hello"}


def test_create_conversation_returns_conversation_object(client: OpenAI) -> None:
    conversation = client.conversations.create(metadata={"topic": "demo"})
    assert conversation.id.startswith("conv_") and conversation.object == "conversation"
    assert conversation.metadata == {"topic": "demo"} and conversation.created_at > 0


def test_retrieve_conversation_returns_what_was_created(client: OpenAI) -> None:
    created = client.conversations.create(metadata={"topic": "demo"})
    assert client.conversations.retrieve(created.id) == created


def test_retrieve_conversation_unknown_is_404(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.conversations.retrieve("conv_missing")
    assert caught.value.body["param"] == "conversation_id"  # type: ignore[index]


def test_update_conversation_replaces_metadata(client: OpenAI) -> None:
    created = client.conversations.create(metadata={"topic": "demo"})
    updated = client.conversations.update(created.id, metadata={"topic": "other", "n": "1"})
    assert updated.metadata == {"topic": "other", "n": "1"}
    assert client.conversations.retrieve(created.id).metadata == {"topic": "other", "n": "1"}


def test_update_conversation_metadata_null_clears_it(http: httpx2.Client) -> None:
    """openai's SDK types the update's metadata as optional: null was a 400."""
    created = http.post("/v1/conversations", json={"metadata": {"topic": "demo"}}).json()
    updated = http.post(f"/v1/conversations/{created['id']}", json={"metadata": None})
    assert updated.status_code == 200 and updated.json()["metadata"] == {}


def test_create_conversation_accepts_safety_identifier(client: OpenAI) -> None:
    assert client.conversations.create(safety_identifier="user-1").id.startswith("conv_")


def test_create_response_keeps_id_of_message_listed_from_its_conversation(client: OpenAI) -> None:
    """A client sending back a message it listed (with its id) sent the same item: given a new id, it was stored
    twice in the conversation once the turn joined it."""
    conversation = client.conversations.create(items=[USER])
    [listed] = client.conversations.items.list(conversation.id)
    replayed = {"type": "message", "role": "user", "content": "Hello", "id": listed.id}  # type: ignore[union-attr]
    response = client.responses.create(model=MODEL, input=[replayed], background=True)
    assert [item.id for item in client.responses.input_items.list(response.id)] == [listed.id]  # type: ignore[union-attr]


def test_delete_conversation_removes_it(client: OpenAI) -> None:
    created = client.conversations.create(items=[USER])
    deleted = client.conversations.delete(created.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (created.id, "conversation.deleted", True)
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.list(created.id)


def test_create_conversation_keeps_initial_items_with_ids(client: OpenAI) -> None:
    created = client.conversations.create(items=[USER, {"role": "assistant", "content": "Hi there"}])
    items = list(client.conversations.items.list(created.id, order="asc"))
    assert [(item.type, item.role, item.status) for item in items] == [  # type: ignore[union-attr]
        ("message", "user", "completed"), ("message", "assistant", "completed")]
    assert items[0].content[0].text == "Hello" and items[1].content[0].type == "output_text"  # type: ignore[union-attr]
    assert all(item.id.startswith("msg_") for item in items)  # type: ignore[union-attr]


def test_create_items_appends_in_order_and_returns_them(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[USER])
    added = client.conversations.items.create(conversation.id, items=[
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
    ])
    assert [item.type for item in added.data] == ["function_call", "function_call_output"]
    listed = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in listed] == ["message", "function_call", "function_call_output"]
    assert [item.id for item in listed[1:]] == [item.id for item in added.data]  # type: ignore[union-attr]


def test_create_items_keeps_client_item_ids(client: OpenAI) -> None:
    conversation = client.conversations.create()
    client.conversations.items.create(conversation.id, items=[
        {"id": "msg_mine", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Hi", "annotations": []}]},
        {"id": "rs_mine", "type": "reasoning", "summary": [],
         "content": [{"type": "reasoning_text", "text": "thinking"}]},
    ])
    assert client.conversations.items.retrieve("msg_mine", conversation_id=conversation.id).id == "msg_mine"
    reasoning = client.conversations.items.retrieve("rs_mine", conversation_id=conversation.id)
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "thinking"  # type: ignore[union-attr]


def test_create_items_with_taken_id_is_400_and_adds_nothing(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[{**USER, "id": "msg_1"}])
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=[{**USER, "id": "msg_2"}, {**USER, "id": "msg_1"}])
    assert caught.value.body["param"] == "items[1].id"  # type: ignore[index]
    assert [item.id for item in client.conversations.items.list(conversation.id)] == ["msg_1"]  # type: ignore[union-attr]


def test_create_items_over_twenty_is_400(client: OpenAI) -> None:
    conversation = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=[USER] * 21)
    assert caught.value.body["param"] == "items"  # type: ignore[index]


def test_create_items_with_bad_item_names_it(client: OpenAI) -> None:
    conversation = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=[USER, {"type": "computer_call_output"}])
    assert caught.value.body["param"] == "items[1].type"  # type: ignore[index]


ORPHAN_OUTPUT = {"type": "function_call_output", "call_id": "call_nope", "output": "x"}
CALL = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}


def test_create_items_with_output_for_call_conversation_lacks_is_400_and_adds_nothing(client: OpenAI) -> None:
    # Added, it would make every later response of the conversation a 400 until the client deleted it.
    conversation = client.conversations.create(items=[USER])
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=[USER, ORPHAN_OUTPUT])
    assert caught.value.body["param"] == "items[1].call_id"  # type: ignore[index]
    assert len(client.conversations.items.list(conversation.id).data) == 1


def test_create_conversation_with_output_for_call_it_lacks_is_400(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.create(items=[USER, ORPHAN_OUTPUT])
    assert caught.value.body["param"] == "items[1].call_id"  # type: ignore[index]


def test_create_items_with_output_for_call_already_in_conversation_is_added(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[USER, CALL])
    added = client.conversations.items.create(conversation.id, items=[ORPHAN_OUTPUT | {"call_id": "call_1"}])
    assert [item.type for item in added.data] == ["function_call_output"]


def test_create_conversation_with_long_metadata_value_is_400(http: httpx2.Client) -> None:
    reply = http.post("/v1/conversations", json={"metadata": {"k": "v" * 513}})
    assert reply.status_code == 400 and reply.json()["error"]["param"].startswith("metadata")


def test_create_conversation_with_unknown_field_is_400(http: httpx2.Client) -> None:
    reply = http.post("/v1/conversations", json={"itemz": []})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "itemz"


def test_list_items_pages_newest_first_by_default(client: OpenAI) -> None:
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": f"m{n}"} for n in range(5)])
    page = client.conversations.items.list(conversation.id, limit=2)
    assert [item.content[0].text for item in page.data] == ["m4", "m3"] and page.has_more  # type: ignore[union-attr]
    assert [item.content[0].text for item in page] == ["m4", "m3", "m2", "m1", "m0"]  # type: ignore[union-attr]


def test_list_items_after_unknown_item_is_400(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[USER])
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.list(conversation.id, after="msg_nope")
    assert caught.value.body["param"] == "after"  # type: ignore[index]


def test_delete_item_removes_it_and_returns_conversation(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[{**USER, "id": "msg_a"}, {**USER, "id": "msg_b"}])
    returned = client.conversations.items.delete("msg_a", conversation_id=conversation.id)
    assert returned.id == conversation.id and returned.object == "conversation"
    assert [item.id for item in client.conversations.items.list(conversation.id)] == ["msg_b"]  # type: ignore[union-attr]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.delete("msg_a", conversation_id=conversation.id)


def test_retrieve_item_unknown_is_404(client: OpenAI) -> None:
    conversation = client.conversations.create()
    with pytest.raises(openai.NotFoundError) as caught:
        client.conversations.items.retrieve("msg_nope", conversation_id=conversation.id)
    assert caught.value.body["param"] == "item_id"  # type: ignore[index]


@pytest.mark.parametrize("path_id", ["msg/a", "msg%2Fa"])
def test_retrieve_and_delete_item_whose_id_holds_a_slash(http: httpx2.Client, path_id: str) -> None:
    """A client's own id may hold a '/': its item was kept and listed, but answered 404 by id."""
    conversation = http.post("/v1/conversations", json={"items": [USER | {"id": "msg/a"}]}).json()
    got = http.get(f"/v1/conversations/{conversation['id']}/items/{path_id}")
    assert got.status_code == 200 and got.json()["id"] == "msg/a"
    assert http.delete(f"/v1/conversations/{conversation['id']}/items/{path_id}").status_code == 200
    assert http.get(f"/v1/conversations/{conversation['id']}/items/{path_id}").status_code == 404


def test_create_items_resolves_item_reference_to_stored_item(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, background=True, input=[USER])
    stored = client.responses.input_items.list(response.id).data[0]
    conversation = client.conversations.create()
    added = client.conversations.items.create(conversation.id, items=[{"type": "item_reference", "id": stored.id}])
    kept = added.data[0]
    assert (kept.id, kept.role, kept.content[0].text) == (stored.id, "user", "Hello")  # type: ignore[union-attr]


def test_create_items_with_unknown_item_reference_is_400(client: OpenAI) -> None:
    conversation = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=[{"type": "item_reference", "id": "msg_nope"}])
    assert caught.value.body["param"] == "items[0].id"  # type: ignore[index]


def test_create_response_in_conversation_echoes_it(client: OpenAI) -> None:
    conversation = client.conversations.create()
    response = client.responses.create(model=MODEL, input="hi", background=True, conversation=conversation.id)
    assert response.conversation is not None and response.conversation.id == conversation.id
    assert client.responses.retrieve(response.id).conversation.id == conversation.id  # type: ignore[union-attr]


def test_create_response_in_unknown_conversation_is_404(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model=MODEL, input="hi", background=True, conversation="conv_missing")
    assert caught.value.body["param"] == "conversation"  # type: ignore[index]


def test_create_response_with_conversation_and_previous_response_id_is_400(client: OpenAI) -> None:
    conversation = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="hi", conversation=conversation.id, previous_response_id="resp_1")
    assert caught.value.body["param"] == "conversation"  # type: ignore[index]


def test_create_response_in_conversation_with_one_queued_is_400_conversation_locked(client: OpenAI) -> None:
    # No worker runs here: the first response stays queued, holding its conversation.
    conversation = client.conversations.create()
    client.responses.create(model=MODEL, input="first", background=True, conversation=conversation.id)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="second", background=True, conversation=conversation.id)
    assert caught.value.body == {  # OpenAI's error, word for word
        "message": "Another process is currently operating on this conversation. Please retry in a few seconds.",
        "type": "invalid_request_error", "param": "conversation", "code": "conversation_locked",
    }


def test_create_response_in_conversation_locked_stores_nothing(client: OpenAI, api: ApiServer) -> None:
    conversation = client.conversations.create()
    first = client.responses.create(model=MODEL, input="first", background=True, conversation=conversation.id)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="second", conversation=conversation.id)
    assert api.db.run(_response_ids_in, conversation.id) == [first.id]


def _response_ids_in(session: Session, conversation_id: str) -> list[str]:
    return list(session.execute(select(ResponseRow.id).where(ResponseRow.conversation_id == conversation_id)).scalars())


def test_create_response_in_conversation_after_queued_one_cancelled_is_accepted(client: OpenAI) -> None:
    conversation = client.conversations.create()
    first = client.responses.create(model=MODEL, input="first", background=True, conversation=conversation.id)
    client.responses.cancel(first.id)
    second = client.responses.create(model=MODEL, input="second", background=True, conversation=conversation.id)
    assert second.status == "queued"


def test_create_response_in_other_conversation_while_one_is_queued_is_accepted(client: OpenAI) -> None:
    busy, other = client.conversations.create(), client.conversations.create()
    client.responses.create(model=MODEL, input="first", background=True, conversation=busy.id)
    assert client.responses.create(model=MODEL, input="x", background=True, conversation=other.id).status == "queued"


def test_create_response_in_conversation_stores_only_new_input_items(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[USER])
    response = client.responses.create(model=MODEL, input="new", background=True, conversation=conversation.id)
    assert [item.content[0].text for item in client.responses.input_items.list(response.id)] == ["new"]  # type: ignore[union-attr]


def test_count_input_tokens_includes_conversation_items(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "a long earlier message " * 20}])
    alone = client.responses.input_tokens.count(model=MODEL, input="hi")
    within = client.responses.input_tokens.count(model=MODEL, input="hi", conversation=conversation.id)
    assert within.input_tokens > alone.input_tokens + 60
