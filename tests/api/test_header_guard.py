"""Requests refused by their headers before any route runs (``api/header_guard.py``): a web page's origin not
allowed, a single-valued header sent twice, a body in a content coding; and what the API answers a browser
whose origin is allowed (CORS)."""

from __future__ import annotations

import gzip
import json
import logging
import socket
import time

import httpx2
import pytest
import websockets.sync.client as ws_client
from support import MODEL
from websockets.exceptions import InvalidStatus

from oss_responses.api.routes import models

BODY = {"model": MODEL, "input": "hi", "background": True}
ALLOWED = "https://app.example"


@pytest.fixture
def settings(settings):  # type: ignore[no-untyped-def]
    return settings.model_copy(update={"allowed_origins": [ALLOWED]})


def _code(response: httpx2.Response) -> str:
    return str(response.json()["error"]["code"])


def test_create_response_from_origin_not_allowed_is_403(http: httpx2.Client) -> None:
    refused = http.post("/v1/responses", json=BODY, headers={"Origin": "https://evil.example"})
    assert (refused.status_code, _code(refused)) == (403, "origin_not_allowed")


def test_connect_socket_from_origin_not_allowed_is_denied(api) -> None:  # type: ignore[no-untyped-def]
    """Browsers apply no CORS to WebSockets: the handshake itself is refused."""
    url = api.base_url.replace("http://", "ws://") + "/v1/responses"
    with pytest.raises(InvalidStatus) as denied:
        ws_client.connect(url, origin="https://evil.example")  # type: ignore[arg-type]
    assert denied.value.response.status_code == 403
    assert json.loads(denied.value.response.body)["error"]["code"] == "origin_not_allowed"


@pytest.mark.parametrize("headers", [{"origin": "https://evil.example"},
                                     {"additional_headers": [("Content-Encoding", "gzip")]}],
                         ids=["origin", "content encoding"])
def test_connect_socket_handshake_answered_with_request_id(api, headers) -> None:  # type: ignore[no-untyped-def]
    """Its handshake is an answer as any other (README: every answer carries an x-request-id): refused, as
    accepted, it carried none, and the refusal's log lines no request id."""
    url = api.base_url.replace("http://", "ws://") + "/v1/responses"
    with pytest.raises(InvalidStatus) as denied:
        ws_client.connect(url, **headers)
    assert denied.value.response.headers["x-request-id"].startswith("req_")
    with ws_client.connect(url, additional_headers=[("x-request-id", "req-socket-1")]) as accepted:
        assert accepted.response.headers["x-request-id"] == "req-socket-1"


def test_create_response_from_allowed_origin_gets_cors_headers(http: httpx2.Client) -> None:
    preflight = http.options("/v1/responses", headers={
        "Origin": ALLOWED, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == ALLOWED
    created = http.post("/v1/responses", json=BODY, headers={"Origin": ALLOWED})
    assert created.status_code == 200 and created.headers["access-control-allow-origin"] == ALLOWED


@pytest.mark.parametrize("header", ["Authorization", "Content-Type"])
def test_create_response_with_single_valued_header_twice_is_400(http: httpx2.Client, header: str) -> None:
    values = {"Authorization": ["Bearer a", "Bearer b"], "Content-Type": ["application/json", "text/plain"]}[header]
    refused = http.post("/v1/responses", content=json.dumps(BODY),
                        headers=[(header, value) for value in values] + [("Accept", "application/json")])
    assert (refused.status_code, _code(refused), refused.json()["error"]["param"]) == (400, "duplicate_header", header)


@pytest.mark.parametrize("header", ["Content-Encoding", "Transfer-Encoding"])
def test_create_response_with_gzipped_body_is_415(address: tuple[str, int], header: str) -> None:
    body = gzip.compress(json.dumps(BODY).encode())
    coding = b"gzip" if header == "Content-Encoding" else b"gzip, chunked"
    framing = b"Content-Length: %d\r\n" % len(body) if header == "Content-Encoding" else b""
    payload = body if header == "Content-Encoding" else b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\n" + header.encode() + b": " + coding + b"\r\n" + framing + b"\r\n"
                     + payload)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, content = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 415")
    assert json.loads(content)["error"]["code"] == "unsupported_content_encoding"


GZIPPED = gzip.compress(json.dumps(BODY).encode())
EARLY_REFUSALS = {
    "duplicate header": ("POST", "/v1/responses", [("Authorization", "Bearer a"), ("Authorization", "Bearer b")],
                         json.dumps(BODY).encode(), 400),
    "content encoding": ("POST", "/v1/responses", [("Content-Encoding", "gzip")], GZIPPED, 415),
    "NUL in the path": ("GET", "/v1/responses/resp_%00", [], b"", 400),
    "NUL in the query": ("GET", "/v1/responses/resp_1/input_items?after=msg_%00", [], b"", 400),
}


@pytest.mark.parametrize(("method", "path", "headers", "body", "status"), EARLY_REFUSALS.values(),
                         ids=EARLY_REFUSALS.keys())
def test_refusal_before_routes_carries_cors_and_request_id(
    http: httpx2.Client, method: str, path: str, headers: list[tuple[str, str]], body: bytes, status: int
) -> None:
    """A browser reads no answer without CORS headers (an opaque network error), and support reads no log
    line without the request id: every refusal carries both, as a route's error does."""
    sent = [("Origin", ALLOWED), ("x-request-id", "r-early"), ("Content-Type", "application/json"), *headers]
    refused = http.request(method, path, content=body, headers=sent)
    assert refused.status_code == status, refused.text
    assert refused.headers.get("access-control-allow-origin") == ALLOWED
    assert refused.headers.get("x-request-id") == "r-early"


def test_unexpected_error_carries_cors_and_request_id(http: httpx2.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(models, "_model", broken)  # the API runs in this process (a thread)
    failed = http.get(f"/v1/models/{MODEL}", headers={"Origin": ALLOWED, "x-request-id": "r-500"})
    assert (failed.status_code, failed.json()["error"]["type"]) == (500, "server_error")
    assert failed.headers.get("access-control-allow-origin") == ALLOWED
    assert failed.headers.get("x-request-id") == "r-500"


def test_preflight_from_origin_not_allowed_is_403_without_cors(http: httpx2.Client) -> None:
    refused = http.options("/v1/responses", headers={"Origin": "https://evil.example",
                                                     "Access-Control-Request-Method": "POST"})
    assert (refused.status_code, _code(refused)) == (403, "origin_not_allowed")
    assert "access-control-allow-origin" not in refused.headers


def test_request_to_unknown_path_is_404_naming_it_as_openai_does(http: httpx2.Client) -> None:
    missing = http.get("/v1/nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "Invalid URL (GET /v1/nope)"


def test_client_leaving_before_its_body_arrived_is_no_error(
    address: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="oss_responses.api.errors")
    with socket.create_connection(address) as sock:
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"model\": ")
        time.sleep(0.2)
    deadline = time.monotonic() + 5
    while not any("left before its request body" in record.getMessage() for record in caplog.records):
        assert time.monotonic() < deadline, [record.getMessage() for record in caplog.records]
        time.sleep(0.05)
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []
