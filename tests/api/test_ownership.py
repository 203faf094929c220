"""Ownership in keys mode: a response, its events, input items, cancel, delete and its chain belong to
the owner of the key that created it; to any other owner they do not exist (404, byte for byte the
answer for an unknown id, never a 403). No worker: the responses stay queued or are cancelled."""

from __future__ import annotations

import httpx2
import openai
import pytest
import redis as redis_lib
from support import MODEL
from support.api_server import ApiServer
from support.key_clients import KeyClient

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.harmony.messages import text_message
from oss_responses.sealing import Sealer
from oss_responses.storage import get_response, save_turn

MISSING = "resp_0000000000000000000000000000missing"

# (method, path, JSON body) with {id} for the response of another owner; each is a 404 for it.
ROUTES = [
    ("GET", "/v1/responses/{id}", None),
    ("GET", "/v1/responses/{id}?stream=true", None),
    ("GET", "/v1/responses/{id}?stream=true&starting_after=0", None),
    ("GET", "/v1/responses/{id}/input_items", None),
    ("GET", "/v1/responses/{id}/input_items?order=asc&limit=1", None),
    ("POST", "/v1/responses/{id}/cancel", None),
    ("DELETE", "/v1/responses/{id}", None),
    ("POST", "/v1/responses", {"model": MODEL, "input": "next", "previous_response_id": "{id}"}),
    ("POST", "/v1/responses", {"model": MODEL, "input": "next", "background": True, "previous_response_id": "{id}"}),
    ("POST", "/v1/responses", {"model": MODEL, "input": "next", "stream": True, "previous_response_id": "{id}"}),
    ("POST", "/v1/responses/compact", {"model": MODEL, "input": "next", "previous_response_id": "{id}"}),
    ("POST", "/v1/responses/input_tokens", {"model": MODEL, "input": "next", "previous_response_id": "{id}"}),
]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"auth": "keys"})


def _request(client: httpx2.Client, method: str, path: str, body: dict | None, response_id: str) -> httpx2.Response:
    if body is not None:
        body = {key: (response_id if value == "{id}" else value) for key, value in body.items()}
    return client.request(method, path.format(id=response_id), json=body)


def _ended(alice: KeyClient) -> str:
    """A background response of alice's, cancelled while queued (so ended: a chain may continue it)."""
    created = alice.sdk.responses.create(model=MODEL, input="alice's secret", background=True)
    alice.sdk.responses.cancel(created.id)
    return created.id


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p} {b and list(b)}" for m, p, b in ROUTES])
def test_response_of_other_owner_is_answered_like_unknown_id(
    alice: KeyClient, bob: KeyClient, method: str, path: str, body: dict | None
) -> None:
    response_id = _ended(alice)
    theirs = _request(bob.http, method, path, body, response_id)
    unknown = _request(bob.http, method, path, body, MISSING)
    # OpenAI's answers: 404 for a response the path names, 400 previous_response_not_found for one to continue.
    assert theirs.status_code == unknown.status_code == (400 if body and "previous_response_id" in body else 404)
    assert theirs.headers.get("content-type") == unknown.headers.get("content-type")
    assert theirs.text == unknown.text.replace(MISSING, response_id)


# Those the owner is answered at once without a worker (the others wait for a generation).
OWN_ROUTES = [route for route in ROUTES if route[2] is None or route[2].get("background")]


@pytest.mark.parametrize(("method", "path", "body"), OWN_ROUTES,
                         ids=[f"{m} {p} {b and list(b)}" for m, p, b in OWN_ROUTES])
def test_response_of_own_owner_is_served(alice: KeyClient, method: str, path: str, body: dict | None) -> None:
    response = _request(alice.http, method, path, body, _ended(alice))
    assert response.status_code == 200, response.text


def test_retrieve_response_of_other_owner_with_sdk_is_not_found(alice: KeyClient, bob: KeyClient) -> None:
    created = alice.sdk.responses.create(model=MODEL, input="hi", background=True)
    with pytest.raises(openai.NotFoundError):
        bob.sdk.responses.retrieve(created.id)
    assert alice.sdk.responses.retrieve(created.id).id == created.id


def test_resume_stream_of_other_owner_with_sdk_is_not_found(alice: KeyClient, bob: KeyClient) -> None:
    response_id = _ended(alice)
    with pytest.raises(openai.NotFoundError):
        bob.sdk.responses.retrieve(response_id, stream=True, starting_after=0)
    replayed = alice.sdk.responses.retrieve(response_id, stream=True, starting_after=0)
    assert [e.type for e in replayed] == ["response.queued"]


def test_cancel_response_of_other_owner_is_404_and_leaves_it_queued(
    alice: KeyClient, bob: KeyClient, api: ApiServer, redis: redis_lib.Redis
) -> None:
    created = alice.sdk.responses.create(model=MODEL, input="hi", background=True)
    with pytest.raises(openai.NotFoundError):
        bob.sdk.responses.cancel(created.id)
    assert api.db.run(get_response, created.id).status == "queued"  # type: ignore[union-attr]
    assert redis.get(redis_keys.cancel(created.id)) is None


def test_delete_response_of_other_owner_is_404_and_keeps_it(alice: KeyClient, bob: KeyClient, api: ApiServer) -> None:
    created = alice.sdk.responses.create(model=MODEL, input="hi", background=True)
    with pytest.raises(openai.NotFoundError):
        bob.sdk.responses.delete(created.id)
    assert api.db.run(get_response, created.id) is not None


def test_input_items_of_other_owner_with_sdk_are_not_found(alice: KeyClient, bob: KeyClient) -> None:
    created = alice.sdk.responses.create(model=MODEL, input="alice's secret", background=True)
    with pytest.raises(openai.NotFoundError):
        bob.sdk.responses.input_items.list(created.id)


def test_chain_onto_other_owner_is_not_found_and_stores_nothing(
    alice: KeyClient, bob: KeyClient, api: ApiServer
) -> None:
    response_id = _ended(alice)
    with pytest.raises(openai.BadRequestError) as refused:
        bob.sdk.responses.create(model=MODEL, input="what did alice say?", previous_response_id=response_id,
                                 background=True)
    assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]
    own = alice.sdk.responses.create(model=MODEL, input="next", previous_response_id=response_id, background=True)
    with api.db.engine.connect() as connection:
        owners = connection.exec_driver_sql("SELECT owner FROM responses ORDER BY created_at").scalars().all()
    assert owners == ["alice", "alice"] and own.previous_response_id == response_id


def test_chain_through_a_turn_of_other_owner_is_previous_response_not_found(
    alice: KeyClient, bob: KeyClient, api: ApiServer
) -> None:
    # A chain whose earlier turn is another owner's (rows written in open mode, then keys turned on).
    response_id = _ended(alice)
    with api.db.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE responses SET owner = 'bob' WHERE id = ?"
                                   if connection.dialect.name == "sqlite" else
                                   "UPDATE responses SET owner = 'bob' WHERE id = %s", (response_id,))
    later = bob.sdk.responses.create(model=MODEL, input="next", previous_response_id=response_id, background=True)
    bob.sdk.responses.cancel(later.id)
    with api.db.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE responses SET owner = 'alice' WHERE id = ?"
                                   if connection.dialect.name == "sqlite" else
                                   "UPDATE responses SET owner = 'alice' WHERE id = %s", (response_id,))
    with pytest.raises(openai.BadRequestError, match="Previous response with id .* not found"):
        bob.sdk.responses.create(model=MODEL, input="again", previous_response_id=later.id, background=True)


def test_replayed_reasoning_sealed_for_other_owner_is_refused_like_tampered(
    alice: KeyClient, bob: KeyClient, settings: Settings
) -> None:
    # A blob alice's response carried (include: reasoning.encrypted_content), leaked to bob.
    thought = text_message("assistant", "alice's private plan", channel="analysis")
    blob = Sealer(settings.encryption_key_values).seal("reasoning", [thought], "alice")
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": blob}
    body = {"model": MODEL, "input": [item, {"role": "user", "content": "repeat your plan"}], "background": True}

    refused = bob.http.post("/v1/responses", json=body)
    served = alice.http.post("/v1/responses", json=body)

    assert refused.status_code == 400 and refused.json()["error"]["param"] == "input[0].encrypted_content"
    assert served.status_code == 200, served.text


def test_item_reference_to_input_item_of_other_owner_is_refused(alice: KeyClient, bob: KeyClient) -> None:
    created = alice.sdk.responses.create(model=MODEL, input="alice's secret", background=True)
    [item] = alice.sdk.responses.input_items.list(created.id).data
    refused = bob.http.post("/v1/responses", json={
        "model": MODEL, "background": True, "input": [{"type": "item_reference", "id": item.id}],
    })
    assert refused.status_code == 400
    assert "alice's secret" not in refused.text


def test_item_reference_to_output_item_of_other_owner_is_refused(
    alice: KeyClient, bob: KeyClient, api: ApiServer
) -> None:
    created = alice.sdk.responses.create(model=MODEL, input="hi", background=True)
    item = {"id": "msg_alice", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "alice's secret", "annotations": []}]}
    final = get_response_json(api, created.id) | {"status": "completed", "output": [item]}
    api.db.run(save_turn, created.id, status="completed", response=final, output_messages=[])
    reference = {"model": MODEL, "background": True, "input": [{"type": "item_reference", "id": "msg_alice"}]}
    refused = bob.http.post("/v1/responses", json=reference)
    assert refused.status_code == 400 and "alice's secret" not in refused.text
    assert alice.http.post("/v1/responses", json=reference).status_code == 200


def get_response_json(api: ApiServer, response_id: str) -> dict:
    record = api.db.run(get_response, response_id)
    assert record is not None
    return dict(record.response)


def test_compact_summarising_response_belongs_to_owner(alice: KeyClient, api: ApiServer) -> None:
    # No worker: the compact request waits for its summary; its summarising row is the owner's meanwhile.
    with pytest.raises(httpx2.ReadTimeout):
        alice.http.post("/v1/responses/compact", json={"model": MODEL, "input": "hi"}, timeout=1.5)
    with api.db.engine.connect() as connection:
        rows = connection.exec_driver_sql("SELECT owner, store FROM responses").all()
    assert [tuple(row) for row in rows] == [("alice", False)]


MISSING_CONVERSATION = "conv_000000000000000000000000000000missing"
CONVERSATION_ROUTES = [
    ("GET", "/v1/conversations/{id}", None),
    ("POST", "/v1/conversations/{id}", {"metadata": {"k": "v"}}),
    ("DELETE", "/v1/conversations/{id}", None),
    ("GET", "/v1/conversations/{id}/items", None),
    ("POST", "/v1/conversations/{id}/items", {"items": [{"role": "user", "content": "bob's"}]}),
    ("GET", "/v1/conversations/{id}/items/msg_alice", None),
    ("DELETE", "/v1/conversations/{id}/items/msg_alice", None),
]


@pytest.mark.parametrize(("method", "path", "body"), CONVERSATION_ROUTES,
                         ids=[f"{m} {p}" for m, p, _ in CONVERSATION_ROUTES])
def test_conversation_of_other_owner_is_404_like_unknown_id(
    alice: KeyClient, bob: KeyClient, method: str, path: str, body: dict | None
) -> None:
    conversation = alice.sdk.conversations.create(items=[{"id": "msg_alice", "role": "user", "content": "secret"}])
    theirs = bob.http.request(method, path.format(id=conversation.id), json=body)
    unknown = bob.http.request(method, path.format(id=MISSING_CONVERSATION), json=body)
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.text == unknown.text.replace(MISSING_CONVERSATION, conversation.id)
    assert [item.id for item in alice.sdk.conversations.items.list(conversation.id)] == ["msg_alice"]  # type: ignore[union-attr]


def test_conversation_item_reference_to_other_owner_item_is_400(alice: KeyClient, bob: KeyClient) -> None:
    created = alice.sdk.responses.create(model=MODEL, input="alice's secret", background=True)
    item_id = alice.sdk.responses.input_items.list(created.id).data[0].id
    conversation = bob.sdk.conversations.create()
    with pytest.raises(openai.BadRequestError) as refused:
        bob.sdk.conversations.items.create(conversation.id, items=[{"type": "item_reference", "id": item_id}])
    assert refused.value.body["param"] == "items[0].id"  # type: ignore[index]
