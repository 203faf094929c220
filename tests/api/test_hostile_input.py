"""Hostile bodies and parameters get a 400 in OpenAI's error shape, never a 500, and store nothing."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from support import MODEL
from support.stalls import waits_meanwhile

from oss_responses import redis_keys
from oss_responses.storage import Database, get_response


def _error(response: httpx2.Response, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    return body["error"]


def _post_raw(http: httpx2.Client, content: bytes) -> httpx2.Response:
    return http.post("/v1/responses", content=content, headers={"content-type": "application/json"})


def _count_rows(db: Database) -> int:
    from sqlalchemy import func, select

    from oss_responses.storage.models import ResponseRow

    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(ResponseRow)) or 0)


def _nothing_stored(api: Any, redis: Any) -> None:
    assert _count_rows(api.db) == 0
    assert list(redis.scan_iter(match=redis_keys.events("*"))) == []
    assert redis.llen(api.settings.queue_for(MODEL)) == 0


def _nested(depth: int) -> bytes:
    return b'{"model": "%s", "input": "hi", "metadata": {"k": ' % MODEL.encode() + b"[" * depth + b"]" * depth + b"}}"


@pytest.mark.parametrize("depth", [200, 1_000, 100_000])
def test_create_response_deeply_nested_json_is_400(http: httpx2.Client, api: Any, redis: Any, depth: int) -> None:
    error = _error(_post_raw(http, _nested(depth)))
    assert "nest" in error["message"]
    _nothing_stored(api, redis)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_output_tokens", 10**30),
        ("max_output_tokens", 2**63),
        ("temperature", 1e308),
        ("temperature", -1),
        ("top_p", 7.5),
        ("top_logprobs", 10**20),
        ("max_tool_calls", 10**25),
    ],
)
def test_create_response_out_of_range_number_is_400(
    http: httpx2.Client, api: Any, redis: Any, field: str, value: Any
) -> None:
    error = _error(http.post("/v1/responses", json={"model": MODEL, "input": "hi", field: value}))
    assert error["param"] == field
    _nothing_stored(api, redis)


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_create_response_non_finite_number_is_400(http: httpx2.Client, api: Any, redis: Any, constant: bytes) -> None:
    body = b'{"model": "%s", "input": "hi", "temperature": %s}' % (MODEL.encode(), constant)
    _error(_post_raw(http, body))
    _nothing_stored(api, redis)


OVERFLOWING = {
    "temperature": (b'"temperature": 1e400', "temperature"),
    "function parameters": (b'"tools": [{"type": "function", "name": "f", "parameters": {"type": "object", '
                            b'"properties": {"x": {"type": "number", "maximum": 1e400}}}}]',
                            "tools[0].parameters.properties.x.maximum"),
    "text format schema": (b'"text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object", '
                           b'"properties": {"x": {"type": "number", "minimum": -1.5E+400}}}}}',
                           "text.format.schema.properties.x.minimum"),
    "309-digit number": (b'"top_p": 1' + b"0" * 309 + b".5", "top_p"),
}


@pytest.mark.parametrize(("fields", "param"), OVERFLOWING.values(), ids=OVERFLOWING.keys())
def test_create_response_number_overflowing_double_is_400(
    http: httpx2.Client, api: Any, redis: Any, fields: bytes, param: str
) -> None:
    """Python reads 1e400 as infinity; a schema holding one was stored with null in its place."""
    body = b'{"model": "%s", "input": "hi", "background": true, %s}' % (MODEL.encode(), fields)
    error = _error(_post_raw(http, body))
    assert (error["param"], error["code"]) == (param, "invalid_value")
    _nothing_stored(api, redis)


def test_create_response_keeps_nul_character_in_message_and_metadata_key(client: Any, api: Any) -> None:
    """A NUL character is valid JSON and valid UTF-8: kept as sent (PostgreSQL included), never a 500."""
    response = client.responses.create(
        model=MODEL, background=True, input=[{"role": "user", "content": "a\u0000b"}], metadata={"k\u0000": "v"}
    )
    stored = api.db.run(get_response, response.id)
    assert stored.request["input"][0]["content"] == "a\u0000b" and stored.request["metadata"] == {"k\u0000": "v"}


def test_create_response_lone_surrogate_is_400(http: httpx2.Client, api: Any, redis: Any) -> None:
    body = b'{"model": "%s", "input": "half \\ud800 a pair"}' % MODEL.encode()
    error = _error(_post_raw(http, body))
    assert error["param"] == "input"
    _nothing_stored(api, redis)


@pytest.mark.parametrize("content", [b'{"model": "\xff"}', b"\xfe\xff\x00{", b'{"input": "\xc3\x28"}'])
def test_create_response_invalid_utf8_is_400(http: httpx2.Client, api: Any, redis: Any, content: bytes) -> None:
    _error(_post_raw(http, content))
    _nothing_stored(api, redis)


@pytest.mark.parametrize("starting_after", [2**64, 2**64 + 1, 10**30, -2])
def test_retrieve_stream_absurd_starting_after_is_400(http: httpx2.Client, starting_after: int) -> None:
    created = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True}).json()
    response = http.get(f"/v1/responses/{created['id']}", params={"stream": "true", "starting_after": starting_after})
    assert _error(response)["param"] == "starting_after"


@pytest.mark.parametrize(
    "params",
    [{"limit": 10**30}, {"limit": 0}, {"limit": -5}, {"after": "x" * 5_000}, {"after": "msg_\u0000"}],
)
def test_list_input_items_absurd_paging_is_400(http: httpx2.Client, params: dict[str, Any]) -> None:
    created = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True}).json()
    response = http.get(f"/v1/responses/{created['id']}/input_items", params=params)
    assert _error(response)["param"] in {"limit", "after"}


@pytest.mark.parametrize("response_id", ["resp_%00", "x" * 5_000])
def test_retrieve_hostile_response_id_is_4xx(http: httpx2.Client, response_id: str) -> None:
    response = http.get(f"/v1/responses/{response_id}")
    assert response.status_code in (400, 404), response.text
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/compact", "/v1/responses/input_tokens"])
@pytest.mark.parametrize(
    ("field", "value", "param"),
    [
        ("input", [{"role": "user", "content": "hi", "type": [None, 1]}], "input[0].type"),
        ("input", [{"role": "user", "content": [{"type": {"a": 1}, "text": "x"}]}], "input[0].content[0]"),
        ("input", [{"role": "assistant", "content": [{"type": ["output_text"], "text": "x"}]}], "input[0]"),
    ],
)
def test_post_unhashable_type_is_400(
    http: httpx2.Client, api: Any, redis: Any, path: str, field: str, value: Any, param: str
) -> None:
    body = {"model": MODEL, "input": "hi"} | {field: value}
    error = _error(http.post(path, json=body))
    assert error["param"].startswith(param), error
    _nothing_stored(api, redis)


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/input_tokens"])  # compact ignores tools
def test_post_tool_with_unhashable_type_is_400(http: httpx2.Client, api: Any, redis: Any, path: str) -> None:
    body = {"model": MODEL, "input": "hi", "tools": [{"type": ["function"], "name": "f"}]}
    assert _error(http.post(path, json=body))["param"] == "tools[0].type"
    _nothing_stored(api, redis)


# The tokenizer's time grows with the square of an unbroken run (harmony/token_cost.py): 1 MB of one
# character took minutes and then panicked, and froze the process that tokenized it meanwhile.
@pytest.mark.parametrize("text", ["x" * 70_000, " a" + " " * 70_000 + "b", "=" * 70_000, "acgt" * 17_500])
def test_create_response_with_unbroken_run_too_long_to_tokenize_is_400(
    http: httpx2.Client, api: Any, redis: Any, text: str
) -> None:
    error = _error(http.post("/v1/responses", json={"model": MODEL, "input": text, "background": True}))
    assert error["param"] == "input" and error["code"] == "string_above_max_length"
    assert "70,000 bytes without a break" in error["message"]
    _nothing_stored(api, redis)


def test_create_response_with_many_long_runs_is_400(http: httpx2.Client, api: Any, redis: Any) -> None:
    text = " ".join(["y" * 60_000] * 5)  # each within the limit, together the cost of 4.3 of the longest allowed
    error = _error(http.post("/v1/responses", json={"model": MODEL, "input": text, "background": True}))
    assert error["param"] == "input" and "5 runs" in error["message"]
    _nothing_stored(api, redis)


def test_count_input_tokens_with_unbroken_run_too_long_is_400_not_500(http: httpx2.Client) -> None:
    error = _error(http.post("/v1/responses/input_tokens", json={"model": MODEL, "input": "x" * 1_000_000}))
    assert error["param"] == "input" and "1,000,000 bytes" in error["message"]


def test_create_response_with_csv_of_empty_rows_is_accepted(client: Any) -> None:
    """66,000 characters of commas and line breaks are many short pieces (linear to tokenize), not a run:
    it was refused, and an agent whose tool returned such a file could not go on."""
    response = client.responses.create(model=MODEL, input=",,,,,,,,,\r\n" * 6_000, background=True)
    assert response.status == "queued"


def test_add_conversation_item_with_unbroken_run_too_long_is_400(http: httpx2.Client, api: Any) -> None:
    """Accepted, it made every later response of the conversation a 400 until it was deleted."""
    created = http.post("/v1/conversations", json={})
    assert created.status_code == 200, created.text
    item = {"type": "message", "role": "user", "content": "acgt" * 17_500}
    error = _error(http.post(f"/v1/conversations/{created.json()['id']}/items", json={"items": [item]}))
    assert error["param"] == "items" and "70,000 bytes" in error["message"]
    listed = http.get(f"/v1/conversations/{created.json()['id']}/items").json()
    assert listed["data"] == []


def test_create_response_with_large_strict_schema_does_not_stall_api(http: httpx2.Client, api: Any) -> None:
    """A 1.5 MB strict schema of 40,000 properties was checked on the event loop in 28 s (a quadratic
    check, and the metaschema's ~350 us a property): every other client of the API waited."""
    names = [f"p{i}" for i in range(40_000)]
    schema = {"type": "object", "properties": {name: {"type": "string"} for name in names}, "required": names,
              "additionalProperties": False}
    body = {"model": MODEL, "input": "json please", "background": True,
            "text": {"format": {"type": "json_schema", "name": "n", "schema": schema, "strict": True}}}
    status, waits = waits_meanwhile(api.base_url, lambda: http.post("/v1/responses", json=body).status_code)
    assert status == 200
    # Parsing and validating it in a thread still holds the GIL in stretches (json.loads, pydantic's core):
    # up to 1.3 s once on CI's two loaded cores, against 28 s on the loop before.
    assert max(waits) < 5.0, max(waits)
