"""The API's connections (``oss_responses/http_protocol.py``): a request's headers are bounded in size, headers and body
in time, and a stopping API does not wait for a body still arriving. Raw sockets: what no SDK would send."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import shutil
import signal
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import redis as redis_lib
from support import MODEL
from support.api_server import serve_in_thread
from support.processes import ServiceProcess, start_api_process
from support.workers import accept
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle
from websockets.exceptions import ConnectionClosedOK
from websockets.sync import client as ws_client

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.http_protocol import DirectBody, direct_body
from oss_responses.socket_direct import direct_socket

HEADER_LIMIT = 8192
READ_S = 1.0
STALL_S = 1.0
KEEP_ALIVE_S = 2.5


@pytest.fixture
def settings(sqlite_template: Path, tmp_path: Path, redis_url: str) -> Settings:
    database = tmp_path / "api.db"
    shutil.copyfile(sqlite_template, database)
    return Settings(database_url=f"sqlite:///{database}", redis_url=redis_url, models=[MODEL],
                    max_header_bytes=HEADER_LIMIT, request_read_seconds=READ_S, send_stall_seconds=STALL_S,
                    keep_alive_seconds=KEEP_ALIVE_S)


@pytest.fixture
def conn(address: tuple[str, int]) -> Iterator[socket.socket]:
    with socket.create_connection(address, timeout=10) as sock:
        yield sock


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Everything the server sends until it closes the connection: status, headers, body."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def _kept_alive_answer(sock: socket.socket) -> bytes:
    """One whole answer on a connection the server keeps open: its head, then ``content-length`` bytes of
    body (the two may come in separate reads)."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    lengths = [line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    length = int(lengths[0])
    while len(body) < length:
        body += sock.recv(65536)
    return head


def _error_code(body: bytes) -> str:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return str(error["code"])


def test_request_headers_over_limit_get_431_and_connection_closed(conn: socket.socket, api) -> None:  # type: ignore[no-untyped-def]
    conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ")
    with pytest.raises(OSError):  # the server closes while the header is still being sent
        for _ in range(1024):
            conn.sendall(b"a" * 4096)
    status, headers, body = _answer(conn)
    assert (status, _error_code(body)) == (431, "request_headers_too_large")
    assert headers["content-type"] == "application/json"
    assert httpx2.get(f"{api.base_url}/v1/models").status_code == 200


def test_request_httptools_cannot_parse_gets_json_400_and_connection_closed(conn: socket.socket) -> None:
    # uvicorn's own answer was text/plain "Invalid HTTP request received."
    conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n")
    status, headers, body = _answer(conn)
    assert (status, headers["content-type"]) == (400, "application/json")
    assert _error_code(body) == "invalid_http_request"


BROWSER = b"Origin: https://app.example\r\nx-request-id: r-refused\r\n"
PROTOCOL_REFUSALS = {
    "headers too large": (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + BROWSER + b"X-Big: " + b"a" * HEADER_LIMIT, 431),
    # (httptools hands on a header once the next one begins: the one before the bad line is not read)
    "not HTTP": (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + BROWSER + b"Accept: */*\r\nBad Header Line\r\n\r\n",
                 400),
    "body too slow": (b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + BROWSER
                      + b"Content-Length: 100\r\n\r\n{\"model\": ", 408),
}


@pytest.mark.parametrize(("sent", "status"), PROTOCOL_REFUSALS.values(), ids=PROTOCOL_REFUSALS.keys())
def test_refusal_by_protocol_carries_cors_and_request_id(settings: Settings, sent: bytes, status: int) -> None:
    """Written by the connection, not the app: the same headers as the app's answers, for the browser's page."""
    for base_url in serve_in_thread(settings.model_copy(update={"allowed_origins": ["https://app.example"]})):
        host, port = base_url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            with contextlib.suppress(OSError):  # the server may close while the large header is still sent
                sock.sendall(sent)
            answer = _answer(sock)
    assert answer[0] == status
    assert answer[1].get("access-control-allow-origin") == "https://app.example"
    assert answer[1].get("x-request-id") == "r-refused"


def test_request_headers_under_limit_are_served(conn: socket.socket) -> None:
    conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + b"a" * (HEADER_LIMIT // 2)
                 + b"\r\n\r\n")
    assert _answer(conn)[0] == 200


def _header_block(size: int, path: bytes = b"/v1/models", headers: bytes = b"Connection: close\r\n") -> bytes:
    """A request whose request line and headers (their closing blank line included) are ``size`` bytes."""
    head = b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n" + headers + b"X-Big: "
    return head + b"a" * (size - len(head) - 4) + b"\r\n\r\n"


@pytest.mark.parametrize(("upgrade", "size", "status"), [
    (False, HEADER_LIMIT, 200), (False, HEADER_LIMIT + 1, 431), (False, HEADER_LIMIT * 7, 431),
    (True, HEADER_LIMIT + 1, 431),
], ids=["at-limit", "one-past", "seven-times", "websocket-one-past"])
def test_request_headers_arriving_in_one_read_are_held_to_limit(
    conn: socket.socket, upgrade: bool, size: int, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A header block read whole at once is counted too: one that completed within a single read was served
    whatever its size (seven times the limit), a WebSocket handshake's included."""
    handshake = (b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
    conn.sendall(_header_block(size, b"/v1/responses", handshake) if upgrade else _header_block(size))
    answer_status, _, body = _answer(conn)
    assert answer_status == status
    if status == 431:
        assert _error_code(body) == "request_headers_too_large"
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


def test_large_body_arriving_with_its_headers_is_not_counted_as_headers(api) -> None:  # type: ignore[no-untyped-def]
    """The body read in the same chunks as the headers is the body's, not the headers' (20x the limit)."""
    counted = httpx2.post(f"{api.base_url}/v1/responses/input_tokens",
                          json={"model": MODEL, "input": "word " * (HEADER_LIMIT * 4)})
    assert counted.status_code == 200, counted.text


def test_request_headers_sent_too_slowly_get_408(conn: socket.socket) -> None:
    conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
    started = time.monotonic()
    status, _, body = _answer(conn)
    assert (status, _error_code(body)) == (408, "request_timeout")
    assert READ_S - 0.1 <= time.monotonic() - started < READ_S + 2


def test_request_headers_trickled_byte_by_byte_get_408_by_deadline(conn: socket.socket) -> None:
    """Each byte arrives in time for uvicorn's keep-alive timer; the deadline holds for the whole block."""
    started = time.monotonic()
    with pytest.raises(OSError):
        for byte in b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            conn.sendall(bytes([byte]))
            time.sleep(0.05)
    assert time.monotonic() - started < READ_S + 2


def test_connection_sending_no_request_is_closed_after_read_time(conn: socket.socket) -> None:
    started = time.monotonic()
    assert conn.recv(1) == b""
    assert READ_S - 0.1 <= time.monotonic() - started < READ_S + 2


def test_request_body_sent_too_slowly_gets_408(conn: socket.socket) -> None:
    conn.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"model\": ")
    status, _, body = _answer(conn)
    assert (status, _error_code(body)) == (408, "request_timeout")


def test_request_on_kept_alive_connection_is_served_after_slow_client_between_requests(conn: socket.socket) -> None:
    """The deadline starts with the request, not with the connection."""
    request = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    conn.sendall(request)
    assert _kept_alive_answer(conn).startswith(b"HTTP/1.1 200")
    time.sleep(READ_S / 2)
    conn.sendall(request)
    assert _kept_alive_answer(conn).startswith(b"HTTP/1.1 200")


def test_serve_request_on_kept_alive_connection_when_idle_longer_than_read_time(conn: socket.socket) -> None:
    """A load balancer reuses its idle connections to the API for up to its own idle timeout (60 s for AWS ALB
    and nginx): closed earlier (uvicorn's 5 s), a request it sent as the API closed one was answered 502."""
    request = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    conn.sendall(request)
    assert _kept_alive_answer(conn).startswith(b"HTTP/1.1 200")
    time.sleep(READ_S * 1.5)
    conn.sendall(request)
    assert _kept_alive_answer(conn).startswith(b"HTTP/1.1 200")


def test_close_kept_alive_connection_when_idle_for_keep_alive_time(conn: socket.socket) -> None:
    conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _kept_alive_answer(conn).startswith(b"HTTP/1.1 200")
    answered = time.monotonic()
    assert conn.recv(1) == b""
    assert KEEP_ALIVE_S - 0.1 <= time.monotonic() - answered < KEEP_ALIVE_S + 2


def test_request_headers_after_idle_keep_alive_get_read_time_from_first_byte(conn: socket.socket) -> None:
    conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _kept_alive_answer(conn).startswith(b"HTTP/1.1 200")
    time.sleep(KEEP_ALIVE_S - 1)
    conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
    started = time.monotonic()
    status, _, body = _answer(conn)
    assert (status, _error_code(body)) == (408, "request_timeout")
    assert READ_S - 0.1 <= time.monotonic() - started < READ_S + 2


def test_stop_api_does_not_wait_for_request_body_still_arriving(
    settings: Settings, tmp_path: Path, started: list[ServiceProcess]
) -> None:
    slow = settings.model_copy(update={"request_read_seconds": 60.0})
    api, base_url = start_api_process(slow, tmp_path / "api.log")
    started.append(api)
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"model\": ")
        time.sleep(0.3)  # the request is with the app, reading its body
        stop_asked = time.monotonic()
        api.send_signal(signal.SIGTERM)
        api.wait(timeout=10)
    assert time.monotonic() - stop_asked < 5
    assert "Traceback" not in (tmp_path / "api.log").read_text()


def test_client_reading_nothing_of_its_event_stream_is_disconnected(
    api, address: tuple[str, int], redis: redis_lib.Redis
) -> None:  # type: ignore[no-untyped-def]
    """Its relay waited on the full send buffer for good, holding the owner's stream slot and the frames
    it could not send."""
    response_id = accept(api.db, redis, api.settings, input="hi", background=True)
    text = "x" * 60_000
    deltas = [b"event: response.output_text.delta\ndata: " + json.dumps({"type": "response.output_text.delta",
              "sequence_number": n, "delta": text}).encode() + b"\n\n" for n in range(2, 202)]
    for n, delta in enumerate(deltas, start=2):
        redis.xadd(redis_keys.events(response_id), {"f": delta}, id=redis_keys.event_id(n))
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window stays small
        sock.settimeout(10)
        sock.connect(address)
        sock.sendall(f"GET /v1/responses/{response_id}?stream=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        time.sleep(STALL_S + 2)  # reading nothing
        received = 0
        with contextlib.suppress(ConnectionResetError):  # the server's close ends what it had sent either way
            while chunk := sock.recv(65536):
                received += len(chunk)
    assert received < sum(map(len, deltas)), f"all {received} bytes received: the connection was kept"


def test_offer_direct_body_writes_only_between_response_start_and_end(settings: Settings) -> None:
    """The hub's writes to a client (``eventlog.following.Sink``): what uvicorn's ``send`` would write, in
    order with it, and only while the response is open."""
    offers: list[bool] = []

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return  # the lifespan's
        writer = direct_body(scope)
        assert writer is not None
        offers.append(writer.offer(b"early"))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        offers.append(writer.offer(b"a"))
        await send({"type": "http.response.body", "body": b"b", "more_body": True})
        offers.append(writer.offer(b"c"))
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        offers.append(writer.offer(b"late"))

    for base_url in serve_in_thread(settings, app):
        answer = httpx2.get(f"{base_url}/", timeout=10)
    assert answer.status_code == 200 and answer.text == "abc"
    assert offers == [False, True, True, False]


def test_offer_direct_socket_sends_messages_only_between_accept_and_close(settings: Settings) -> None:
    """The hub's writes to a WebSocket client: messages as uvicorn's ``send`` sends them, in order with it, and
    only while the socket is open."""
    offers: list[bool] = []

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "websocket":
            return  # the lifespan's
        writer = direct_socket(scope)
        assert writer is not None
        await receive()  # websocket.connect
        offers.append(writer.offer([b"early"]))
        await send({"type": "websocket.accept"})
        offers.append(writer.offer([b"a"]))
        await send({"type": "websocket.send", "text": "b"})
        offers.append(writer.offer(["c\u00e9".encode(), b"d"]))
        await send({"type": "websocket.close", "code": 1000})
        offers.append(writer.offer([b"late"]))

    for base_url in serve_in_thread(settings, app):
        with ws_client.connect(base_url.replace("http://", "ws://") + "/") as client:
            received = [client.recv(timeout=10) for _ in range(4)]
            with pytest.raises(ConnectionClosedOK):
                client.recv(timeout=10)
    assert received == ["a", "b", "c\u00e9", "d"]
    assert offers == [False, True, True, False]


def test_request_served_by_api_protocol_leaves_no_reference_cycle(api) -> None:  # type: ignore[no-untyped-def]
    """A cycle per request (the request's DirectBody held its uvicorn cycle, which holds the scope that holds
    it) waited for the garbage collector, whose passes stop the API: 8 passes over 8,000 responses in
    ``bench/memory_growth.py`` where there had been none."""
    with httpx2.Client(base_url=api.base_url, timeout=10) as http:
        assert http.get("/v1/models").status_code == 200
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with httpx2.Client(base_url=api.base_url, timeout=10) as http:
            for _ in range(3):
                assert http.get("/v1/models").status_code == 200
        gc.collect()
        cycles = [type(obj).__name__ for obj in gc.garbage if isinstance(obj, (RequestResponseCycle, DirectBody))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert cycles == []


def _streaming_app(chunks: int, events: dict[str, object]):  # type: ignore[no-untyped-def]
    """An app whose ``/stream`` sends ``chunks`` chunks 0.1 s apart (until its client leaves) and whose other
    paths answer at once after reading the body; ``events`` records what the stream's request saw."""
    import asyncio

    async def app(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return  # the lifespan's
        if scope["path"] != "/stream":
            while (await receive()).get("more_body"):
                pass
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        await receive()  # its (empty) body
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        left = asyncio.ensure_future(receive())  # the next message is the client leaving
        for n in range(chunks):
            done, _ = await asyncio.wait([left], timeout=0.1)
            if done:
                events["received"] = left.result()["type"]
                return
            await send({"type": "http.response.body", "body": b"chunk %d;" % n, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        left.cancel()

    return app


STREAM_CHUNKS = int(READ_S * 20)  # 0.1 s apart: the stream outlasts the request deadline twice over


def test_request_pipelined_behind_stream_gets_body_deadline_when_its_turn_comes(settings: Settings) -> None:
    """uvicorn reads nothing of a request queued behind a response under way: its body's deadline ran from its
    headers, and its 408 was written into the middle of the stream, which was cut."""
    events: dict[str, object] = {}
    for base_url in serve_in_thread(settings, _streaming_app(STREAM_CHUNKS, events)):
        host, port = base_url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"
                         b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\":")
            received = b""
            with contextlib.suppress(ConnectionResetError):
                while chunk := sock.recv(65536):
                    received += chunk
    stream, _, after = received.partition(b"\r\n0\r\n\r\n")
    assert b"chunk %d;" % (STREAM_CHUNKS - 1) in stream and b"HTTP/1.1 408" not in stream
    assert after.startswith(b"HTTP/1.1 408 ")
    assert _error_code(after.partition(b"\r\n\r\n")[2]) == "request_timeout"


def test_connection_reset_behind_pipelined_request_disconnects_stream_under_way(settings: Settings) -> None:
    """uvicorn marks only the last request read as disconnected: the stream before it never heard its
    client leave, and its sends went to the closed connection."""
    events: dict[str, object] = {}
    for base_url in serve_in_thread(settings, _streaming_app(100, events)):
        host, port = base_url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            received = b""
            while b"chunk 2;" not in received:
                received += sock.recv(65536)
            sock.sendall(b"GET /models HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.2)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # closed with a RST
        deadline = time.monotonic() + 5
        while "received" not in events and time.monotonic() < deadline:
            time.sleep(0.05)
    assert events.get("received") == "http.disconnect"


@pytest.mark.parametrize("headers", [b"Sec-WebSocket-Version: 13\r\n", b"Sec-WebSocket-Version: 8\r\n"
                                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"])
def test_websocket_handshake_refused_gets_400_and_logs_no_error(
    conn: socket.socket, headers: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """A malformed upgrade (a scanner, a broken proxy): its 400, and no 'Fatal error on transport' from a
    protocol that looked for the scope uvicorn makes only for an accepted handshake."""
    conn.sendall(b"GET /v1/responses HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 + headers + b"\r\n")
    status, _, _ = _answer(conn)
    time.sleep(0.2)  # the protocol's handling ends after the answer is written
    assert status == 400
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
