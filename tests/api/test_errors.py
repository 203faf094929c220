"""Bad requests get OpenAI's error shape and a 4xx, never a 500 or a traceback."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest
from openai import OpenAI
from support import MODEL


def _error(response: httpx2.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_create_response_malformed_json_is_400(http: httpx2.Client) -> None:
    response = http.post("/v1/responses", content=b'{"model": "gpt-oss-20b",',
                         headers={"content-type": "application/json"})
    assert _error(response, 400)["type"] == "invalid_request_error"


def test_create_response_invalid_utf8_is_400(http: httpx2.Client) -> None:
    response = http.post("/v1/responses", content=b'{"model": "\xff"}', headers={"content-type": "application/json"})
    _error(response, 400)


def test_create_response_wrong_content_type_is_400(http: httpx2.Client) -> None:
    response = http.post("/v1/responses", content=b"model=gpt-oss-20b", headers={"content-type": "text/plain"})
    _error(response, 400)


def test_create_response_body_not_object_is_400(http: httpx2.Client) -> None:
    _error(http.post("/v1/responses", json=[1, 2]), 400)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi"}, "model"),
        ({"model": MODEL, "input": "hi", "bogus": 1}, "bogus"),
        ({"model": MODEL, "input": 42}, "input"),
        ({"model": MODEL, "input": "hi", "temperature": "hot"}, "temperature"),
        ({"model": MODEL, "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": MODEL, "input": "hi", "stream": "maybe"}, "stream"),
        ({"model": MODEL, "input": [{"type": "computer_call_output", "call_id": "c"}]}, "input[0].type"),
        ({"model": MODEL, "input": "hi", "tools": [{"type": "file_search"}]}, "tools[0].type"),
        ({"model": MODEL, "input": "hi", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"model": MODEL, "input": "hi", "tool_choice": {"type": "nonsense"}}, "tool_choice.type"),
        ({"model": MODEL, "input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]},
         "input[0].content[0].type"),
        ({"model": MODEL, "input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
         "input[0].content[0].text"),
        ({"model": MODEL, "input": "hi", "tools": [{"type": "function", "name": "get weather"}]}, "tools[0].name"),
        ({"model": MODEL, "input": "hi", "metadata": {"k" * 65: "v"}}, "metadata"),
        ({"model": MODEL, "input": "hi", "text": {"format": {"type": "json_schema", "schema": {}}}},
         "text.format.name"),
    ],
)
def test_create_response_invalid_body_is_400_with_param(http: httpx2.Client, body: dict[str, Any], param: str) -> None:
    error = _error(http.post("/v1/responses", json=body), 400)
    assert error["param"] == param, error  # where the body is wrong: no name of a union's branch ("input.str")


def test_create_response_unknown_model_is_404_model_not_found(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="gpt-9", input="hi")
    assert caught.value.code == "model_not_found" and caught.value.param == "model"


def test_create_response_unknown_previous_response_is_400_previous_response_not_found(client: OpenAI) -> None:
    # OpenAI's answer (HTTP and WebSocket): clients that replay the whole conversation on it key on the 400.
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="hi", previous_response_id="resp_nope", background=True)
    assert (caught.value.param, caught.value.code) == ("previous_response_id", "previous_response_not_found")
    assert caught.value.message.endswith("Previous response with id 'resp_nope' not found.")


def test_create_response_background_without_store_is_400(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="hi", background=True, store=False)
    assert caught.value.param == "background"


def test_retrieve_response_unknown_is_404(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_unknown")


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=x", "order=sideways"])
def test_list_input_items_invalid_query_is_400(http: httpx2.Client, client: OpenAI, query: str) -> None:
    response_id = client.responses.create(model=MODEL, input="hi", background=True).id
    _error(http.get(f"/v1/responses/{response_id}/input_items?{query}"), 400)


def test_unknown_route_is_404_with_error_shape(http: httpx2.Client) -> None:
    _error(http.get("/v1/nothing-here"), 404)


def test_wrong_method_is_405_with_error_shape(http: httpx2.Client) -> None:
    _error(http.put("/v1/responses"), 405)
