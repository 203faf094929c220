"""``GET /v1/responses/{id}`` with ``include``, as the SDK's ``responses.retrieve(id, include=[...])`` sends
it (``include[]=``): checked as a create's ``include`` is, and ``reasoning.encrypted_content`` seals the
stored reasoning items (a worker in-process runs the responses; the server has a key). The server
without keys is in test_sealed_checks.py."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import openai
import pytest
from openai import OpenAI
from openai.types.responses import Response
from sqlalchemy import update
from support import MODEL
from support.api_server import ApiServer

from oss_responses.config import Settings
from oss_responses.sealing import Sealer
from oss_responses.storage import get_response
from oss_responses.storage.models import ResponseRow
from oss_responses.storage.records import SEALING_PLAN
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.testing import local_worker, run_response_now

INCLUDE = "reasoning.encrypted_content"


@pytest.fixture
def worker(settings: Settings) -> Iterator[WorkerContext]:
    with local_worker(settings) as ctx:
        yield ctx


def _completed(client: OpenAI, worker: WorkerContext, **fields: object) -> str:
    created = client.responses.create(model=MODEL, input="hi", background=True, **fields)  # type: ignore[call-overload]
    assert run_response_now(created.id, worker=worker) == "completed"
    return str(created.id)


def _reasoning_messages(api: ApiServer, response_id: str) -> list[dict]:
    record = api.db.run(get_response, response_id)
    assert record is not None
    return [m for m in record.output_messages if m.get("channel") == "analysis" and not m.get("recipient")]


def test_retrieve_response_include_encrypted_content_seals_stored_reasoning(
    client: OpenAI, api: ApiServer, worker: WorkerContext, settings: Settings
) -> None:
    response_id = _completed(client, worker)
    assert all(item.encrypted_content is None for item in client.responses.retrieve(response_id).output
               if item.type == "reasoning")

    fetched = client.responses.retrieve(response_id, include=[INCLUDE])

    reasoning = [item for item in fetched.output if item.type == "reasoning"]
    assert reasoning and all(item.encrypted_content for item in reasoning)
    sealer = Sealer(settings.encryption_key_values)
    opened = [sealer.open("reasoning", item.encrypted_content or "") for item in reasoning]
    assert opened == [[message] for message in _reasoning_messages(api, response_id)]  # what the worker stored
    assert [item.content for item in reasoning] == [
        item.content for item in client.responses.retrieve(response_id).output if item.type == "reasoning"]


def test_retrieve_response_include_row_without_sealing_plan_seals_each_reasoning_message(
    client: OpenAI, api: ApiServer, worker: WorkerContext, settings: Settings
) -> None:
    # A row stored before workers kept the sealing plan: each reasoning item seals its own stored message.
    response_id = _completed(client, worker)
    record = api.db.run(get_response, response_id)
    assert record is not None and (record.state or {}).get(SEALING_PLAN)
    api.db.run(lambda session: session.execute(update(ResponseRow).where(ResponseRow.id == response_id)
                                               .values(state=None)))

    fetched = client.responses.retrieve(response_id, include=[INCLUDE])

    sealer = Sealer(settings.encryption_key_values)
    opened = [sealer.open("reasoning", item.encrypted_content or "") for item in fetched.output
              if item.type == "reasoning"]
    assert opened == [[message] for message in _reasoning_messages(api, response_id)]


def test_retrieve_response_include_plain_query_is_served_as_sdk_form(
    http: httpx2.Client, client: OpenAI, worker: WorkerContext
) -> None:
    response_id = _completed(client, worker)
    answer = http.get(f"/v1/responses/{response_id}", params={"include": INCLUDE})
    assert answer.status_code == 200
    fetched = Response.model_validate(answer.json())
    assert [bool(item.encrypted_content) for item in fetched.output if item.type == "reasoning"] == [True]


def test_retrieve_response_include_asked_at_create_keeps_stored_blob(client: OpenAI, worker: WorkerContext) -> None:
    response_id = _completed(client, worker, include=[INCLUDE])
    stored = [item.encrypted_content for item in client.responses.retrieve(response_id).output
              if item.type == "reasoning"]
    fetched = client.responses.retrieve(response_id, include=[INCLUDE])
    assert stored[0] and [item.encrypted_content for item in fetched.output if item.type == "reasoning"] == stored


@pytest.mark.parametrize("query", [{"include[]": "reasoning.everything"}, {"include": "bogus"}])
def test_retrieve_response_unknown_include_is_bad_request_as_on_create(
    http: httpx2.Client, client: OpenAI, query: dict[str, str]
) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True)
    value = next(iter(query.values()))
    on_create = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "include": [value]})

    answer = http.get(f"/v1/responses/{created.id}", params=query)

    assert answer.status_code == on_create.status_code == 400
    assert answer.json() == on_create.json()
    assert answer.json()["error"]["param"] == "include[0]" and answer.json()["error"]["code"] == "invalid_value"


def test_retrieve_response_unknown_include_with_sdk_is_bad_request(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True)
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.retrieve(created.id, include=[INCLUDE, "bogus"])  # type: ignore[list-item]
    assert raised.value.param == "include[1]"  # type: ignore[attr-defined]


def test_retrieve_response_include_echo_only_values_change_nothing(client: OpenAI, worker: WorkerContext) -> None:
    response_id = _completed(client, worker)
    fetched = client.responses.retrieve(response_id, include=["message.output_text.logprobs",
                                                              "message.input_image.image_url"])
    assert fetched.model_dump() == client.responses.retrieve(response_id).model_dump()


def test_retrieve_response_stream_with_include_replays_events_as_written(
    client: OpenAI, worker: WorkerContext
) -> None:
    response_id = _completed(client, worker)
    plain = [event.model_dump() for event in client.responses.retrieve(response_id, stream=True)]
    included = [event.model_dump() for event in client.responses.retrieve(response_id, stream=True,
                                                                             include=[INCLUDE])]
    assert included == plain and plain[-1]["type"] == "response.completed"
