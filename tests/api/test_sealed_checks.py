"""What the API refuses about sealed content before storing anything (no worker runs here): on a
server without encryption keys."""

from __future__ import annotations

import httpx2
import openai
import pytest
from openai import OpenAI
from sqlalchemy import func, select
from support import MODEL
from support.api_server import ApiServer

from oss_responses.config import Settings
from oss_responses.harmony.messages import text_message
from oss_responses.sealing import Sealer, new_key
from oss_responses.storage import ResponseRow


@pytest.fixture
def settings(database_url: str, redis_url: str) -> Settings:
    return Settings(database_url=database_url, redis_url=redis_url, models=[MODEL],
                    tool_servers={"calc": "https://calc.example/mcp"})


def _reasoning(blob: str) -> dict:
    return {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": blob}


def _stored_rows(api: ApiServer) -> int:
    with api.db.session() as session:
        return session.execute(select(func.count()).select_from(ResponseRow)).scalar_one()


def test_create_response_include_encrypted_content_without_keys_is_bad_request(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input="hi", store=False, include=["reasoning.encrypted_content"])
    assert raised.value.param == "include" and "OSS_RESPONSES_ENCRYPTION_KEYS" in raised.value.message  # type: ignore[attr-defined]


def test_create_response_foreign_encrypted_content_is_bad_request_and_stores_nothing(
    client: OpenAI, api: ApiServer
) -> None:
    foreign = Sealer([new_key()]).seal("reasoning", [text_message("assistant", "x", channel="analysis")])
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input=[{"role": "user", "content": "hi"}, _reasoning(foreign)],
                                store=False)
    assert raised.value.param == "input[1].encrypted_content"  # type: ignore[attr-defined]
    assert _stored_rows(api) == 0


def test_compact_without_keys_is_bad_request_and_stores_nothing(client: OpenAI, api: ApiServer) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.compact(model=MODEL, input="hi")
    assert "OSS_RESPONSES_ENCRYPTION_KEYS" in raised.value.message
    assert _stored_rows(api) == 0


def test_compact_unknown_model_is_not_found(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.responses.compact(model="gpt-oss-7b", input="hi")
    assert raised.value.param == "model"  # type: ignore[attr-defined]


@pytest.mark.parametrize("field", ["authorization", "headers"])
def test_create_response_mcp_credentials_without_keys_is_bad_request_and_stores_nothing(
    client: OpenAI, api: ApiServer, field: str
) -> None:
    tool = {"type": "mcp", "server_label": "calc", "require_approval": "never",
            field: "sk-secret" if field == "authorization" else {"X-Key": "secret"}}
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input="hi", background=True, tools=[tool])  # type: ignore[list-item]
    assert raised.value.param == f"tools[0].{field}" and "OSS_RESPONSES_ENCRYPTION_KEYS" in raised.value.message  # type: ignore[attr-defined]
    assert _stored_rows(api) == 0


def test_retrieve_response_include_encrypted_content_without_keys_is_bad_request_as_create(
    client: OpenAI, http: httpx2.Client
) -> None:
    created = client.responses.create(model=MODEL, input="hi", background=True)
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.retrieve(created.id, include=["reasoning.encrypted_content"])
    on_create = http.post("/v1/responses", json={"model": MODEL, "input": "hi",
                                                 "include": ["reasoning.encrypted_content"]})
    assert on_create.status_code == 400 and raised.value.body == on_create.json()["error"]
    assert raised.value.param == "include" and raised.value.code == "unsupported_value"  # type: ignore[attr-defined]
