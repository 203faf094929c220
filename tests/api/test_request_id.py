"""``x-request-id``: echoed when the client sends one, made when it does not, on JSON and SSE responses."""

from __future__ import annotations

import httpx2
from support import MODEL


def test_echo_request_id_sent_by_client(http: httpx2.Client) -> None:
    answer = http.get("/healthz", headers={"x-request-id": "client-id-42"})
    assert answer.headers["x-request-id"] == "client-id-42"


def test_make_request_id_when_absent(http: httpx2.Client) -> None:
    first, second = http.get("/healthz"), http.get("/healthz")
    assert first.headers["x-request-id"].startswith("req_")
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


def test_replace_request_id_that_is_not_a_token(http: httpx2.Client) -> None:
    answer = http.get("/healthz", headers={"x-request-id": "two words"})
    assert answer.headers["x-request-id"].startswith("req_")


def test_echo_request_id_on_error_and_stream(http: httpx2.Client) -> None:
    missing = http.get("/v1/responses/resp_nothing", headers={"x-request-id": "r-404"})
    assert (missing.status_code, missing.headers["x-request-id"]) == (404, "r-404")
    body = {"model": MODEL, "input": "hi", "background": True, "stream": True}
    with http.stream("POST", "/v1/responses", json=body, headers={"x-request-id": "r-sse"}) as stream:
        assert stream.headers["x-request-id"] == "r-sse"
