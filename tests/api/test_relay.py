"""SSE relay: a quiet stream gets keepalive events, as OpenAI sends them; an API process told to stop
cuts its open streams at once instead of waiting for them (uvicorn waits for open connections before
the app shuts down), alone or under uvicorn's supervisor. Responses on ``gpt-oss-120b`` stay queued:
no worker serves that model here."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import threading
import time
from pathlib import Path

import httpx2
import pytest
import redis as redis_lib
from openai import OpenAI
from openai.types.responses import ResponseTextDeltaEvent
from sqlalchemy import select
from support import MODEL
from support.processes import ServiceProcess, service_env, start_api_process, start_worker_process
from support.workers import accept

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.eventlog import frame, parse_frame
from oss_responses.eventlog.frames import keepalive_frame
from oss_responses.eventlog.writes import close_after
from oss_responses.sealing import new_key
from oss_responses.storage import Database, ResponseRow

QUEUED_MODEL = "gpt-oss-120b"
PING_S = 0.2
STOPPED_WITHIN_S = 5.0


@pytest.fixture
def settings(database_url: str, redis_url: str) -> Settings:
    return Settings(database_url=database_url, redis_url=redis_url, models=[MODEL, QUEUED_MODEL],
                    encryption_keys=[new_key()], stream_ping_seconds=PING_S)


def _queued(http: httpx2.Client, **body: object) -> str:
    created = http.post("/v1/responses", json={"model": QUEUED_MODEL, "input": "hi", "background": True} | body)
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def test_stream_quiet_response_gets_keepalive_events(http: httpx2.Client) -> None:
    """Events, as OpenAI sends on a long response: a comment was skipped by clients, whose idle timers went on
    (Codex CLI dropped a quiet stream and sent its request again). Numbered as the last event."""
    response_id = _queued(http)
    received = b""
    keepalive = keepalive_frame(1)  # after response.created (0) and response.queued (1)
    with http.stream("GET", f"/v1/responses/{response_id}", params={"stream": "true"}) as stream:
        for chunk in stream.iter_raw():
            received += chunk
            if received.count(keepalive) == 2:
                break
    opening, _, rest = received.partition(keepalive)
    assert opening.count(b"\n\n") == 2  # response.created, response.queued
    assert rest == keepalive  # nothing between two keepalives while nothing happened


def test_stream_to_client_closing_its_connection_says_connection_once(
    api, address: tuple[str, int]  # type: ignore[no-untyped-def]
) -> None:
    """"Connection" is hop-by-hop, uvicorn's to set: sse-starlette's "keep-alive" went out beside its "close"."""
    with httpx2.Client(base_url=api.base_url) as http:
        response_id = _queued(http)
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(f"GET /v1/responses/{response_id}?stream=true HTTP/1.1\r\nHost: x\r\n"
                     "Connection: close\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(65536)
    headers = [line.split(b":")[0].lower() for line in head.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]]
    assert headers.count(b"connection") == 1 and b"connection: close" in head.lower()


def test_stream_sdk_reads_through_keepalive_events(http: httpx2.Client, client: OpenAI) -> None:
    """openai's SDK has no type for a keepalive, and passes it on as any event it does not know."""
    response_id = _queued(http)
    cancels: list[int] = []

    def cancel_after_a_few_keepalives() -> None:  # its stream then ends
        time.sleep(3 * PING_S)
        cancels.append(http.post(f"/v1/responses/{response_id}/cancel").status_code)

    canceller = threading.Thread(target=cancel_after_a_few_keepalives)
    types, numbers = [], []
    for event in client.responses.retrieve(response_id, stream=True):
        types.append(event.type)
        numbers.append(event.sequence_number)
        if event.type == "response.queued":
            canceller.start()
    canceller.join(timeout=10)  # its reply may come after the stream's end
    assert types[:2] == ["response.created", "response.queued"] and len(types) > 2
    assert set(types[2:]) == {"keepalive"} and set(numbers[2:]) == {1}
    assert cancels == [200]
    assert client.responses.retrieve(response_id).status == "cancelled"


def _dechunked(body: bytes) -> bytes:
    """An HTTP/1.1 chunked body, joined; it must end with its last chunk."""
    data = b""
    while True:
        size, _, body = body.partition(b"\r\n")
        length = int(size, 16)
        if length == 0:
            assert body == b"\r\n"
            return data
        data, body = data + body[:length], body[length + 2:]


def test_stream_to_client_reading_slowly_gets_every_event_once_in_order(
    api, address: tuple[str, int], redis: redis_lib.Redis  # type: ignore[no-untyped-def]
) -> None:
    """Its events are written to it from the hub's read while it keeps up, and by its request's task
    (which waits for the connection) once its send buffer is full: both, one after the other, as it
    falls behind and catches up."""
    response_id = accept(api.db, redis, api.settings, input="hi", background=True)  # events 0 and 1
    sizes = [10] * 20 + [100_000] * 60 + [10] * 20  # keeping up, far behind (~6 MB), keeping up again
    deltas = [ResponseTextDeltaEvent(type="response.output_text.delta", item_id="msg_1", output_index=0,
                                     content_index=0, delta=f"<{n}>" + "x" * size, logprobs=[], sequence_number=n)
              for n, size in enumerate(sizes, start=2)]
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window stays small
        sock.settimeout(10)
        sock.connect(address)
        sock.sendall(f"GET /v1/responses/{response_id}?stream=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        received, searched = b"", 0
        for delta in deltas:
            key, entry_id = redis_keys.events(response_id), redis_keys.event_id(delta.sequence_number)
            redis.xadd(key, {"f": frame(delta)}, id=entry_id)
            if len(delta.delta) < 100:  # read up to it before the next
                # Searched in all that came since the last search, not in the last bytes only: keepalive
                # events follow it while a slow client drains its backlog (every PING_S).
                marker = f"<{delta.sequence_number}>".encode()
                while (found := received.find(marker, searched)) < 0:
                    searched = max(0, len(received) - len(marker))
                    received += sock.recv(65536)
                searched = found + len(marker)
        close_after(redis, response_id, [], "completed", 60)
        while not received.endswith(b"0\r\n\r\n"):
            received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
    frames = [data for data in _dechunked(body).split(b"\n\n")[:-1] if not data.startswith(b"event: keepalive\n")]
    assert [parse_frame(data + b"\n\n")["sequence_number"] for data in frames] == list(range(len(sizes) + 2))
    assert [parse_frame(data + b"\n\n")["delta"] for data in frames[2:]] == [delta.delta for delta in deltas]


# --- an API process told to stop ---------------------------------------------------------------
@pytest.fixture
def api_settings(sqlite_template: Path, tmp_path: Path, redis_url: str) -> Settings:
    """On SQLite only: stopping touches no database of its own."""
    database = tmp_path / "api.db"
    shutil.copyfile(sqlite_template, database)
    return Settings(database_url=f"sqlite:///{database}", redis_url=redis_url, models=[MODEL, QUEUED_MODEL])


class Follower(threading.Thread):
    """Reads one stream to its end; ``outcome``: how it ended."""

    def __init__(self, url: str, body: dict[str, object] | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.opened = threading.Event()
        self.outcome = ""

    def run(self) -> None:
        method = "GET" if self.body is None else "POST"
        try:
            with httpx2.stream(method, self.url, json=self.body, timeout=60) as stream:
                for _ in stream.iter_raw():
                    self.opened.set()
            self.outcome = "completed"
        except httpx2.RemoteProtocolError:
            self.outcome = "cut"


@pytest.mark.parametrize("processes", [1, 2], ids=["one-process", "supervised"])
def test_stop_api_cuts_open_streams_at_once(
    api_settings: Settings, tmp_path: Path, started: list[ServiceProcess], processes: int
) -> None:
    env = service_env(api_settings, OSS_RESPONSES_API_PROCESSES=str(processes))
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    api, base_url = start_api_process(api_settings, tmp_path / "api.log", env)
    started.append(api)
    with httpx2.Client(base_url=base_url) as http:
        followers = [Follower(f"{base_url}/v1/responses/{_queued(http)}?stream=true") for _ in range(3)]
    for follower in followers:
        follower.start()
        assert follower.opened.wait(10)
    stop_asked = time.monotonic()
    api.send_signal(signal.SIGTERM)
    api.wait(timeout=STOPPED_WITHIN_S)
    for follower in followers:
        follower.join(timeout=STOPPED_WITHIN_S)
    assert time.monotonic() - stop_asked < STOPPED_WITHIN_S
    assert [follower.outcome for follower in followers] == ["cut"] * 3
    log = (tmp_path / "api.log").read_text()
    assert log.count("the stream it was relaying is cut") == 3
    assert "ERROR" not in log  # uvicorn's "ASGI callable returned without completing response." per cut stream


def test_stop_api_cancels_the_responses_its_streaming_clients_ran(
    api_settings: Settings, tmp_path: Path, started: list[ServiceProcess]
) -> None:
    api, base_url = start_api_process(api_settings, tmp_path / "api.log")
    started.append(api)
    follower = Follower(f"{base_url}/v1/responses", {"model": QUEUED_MODEL, "input": "hi", "stream": True})
    follower.start()
    assert follower.opened.wait(10)
    api.send_signal(signal.SIGTERM)
    api.wait(timeout=STOPPED_WITHIN_S)
    follower.join(timeout=STOPPED_WITHIN_S)
    assert follower.outcome == "cut"
    assert _statuses(api_settings) == ["cancelled"]


def test_stop_api_answers_a_plain_request_it_is_waiting_on(
    api_settings: Settings, tmp_path: Path, started: list[ServiceProcess]
) -> None:
    """No stream to resume: the stopping process waits for the response's end and answers it."""
    settings = api_settings.model_copy(update={"scripted_tokens_per_second": 40.0})
    started.append(start_worker_process(settings, tmp_path / "worker.log"))
    api, base_url = start_api_process(settings, tmp_path / "api.log")
    started.append(api)
    answers: list[httpx2.Response] = []
    waiting = threading.Thread(target=lambda: answers.append(httpx2.post(
        f"{base_url}/v1/responses", json={"model": MODEL, "input": "tokens 80"}, timeout=30)))  # ~2 s of answer
    waiting.start()
    _wait_for_one_response(settings)
    api.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert api.poll() is None and not answers  # still waiting, as for any request in flight
    waiting.join(timeout=10)
    api.wait(timeout=STOPPED_WITHIN_S)
    assert answers[0].status_code == 200 and answers[0].json()["status"] == "completed"


def _wait_for_one_response(settings: Settings) -> None:
    deadline = time.monotonic() + 10
    while not _statuses(settings):
        assert time.monotonic() < deadline, "the request was not accepted"
        time.sleep(0.05)


def _statuses(settings: Settings) -> list[str]:
    """The statuses of every response in the database, read from SQL."""
    db = Database(settings.database_url)
    try:
        with db.session() as session:
            return list(session.scalars(select(ResponseRow.status)))
    finally:
        db.dispose()


# --- an API process killed (SIGKILL, OOM, host loss) -------------------------------------------
SLOW_TOKENS_PER_S = 20.0
KILLED_WITHIN_S = 15.0  # from the SIGKILL to its responses' cancel: relays.ALIVE_SECONDS + GONE_AFTER_SECONDS + a pass


@pytest.fixture
def slow_settings(api_settings: Settings) -> Settings:
    return api_settings.model_copy(update={"scripted_tokens_per_second": SLOW_TOKENS_PER_S})


class Streamed(threading.Thread):
    """A client streaming a create's response to its end (or until its API is killed)."""

    def __init__(self, base_url: str, tokens: int, **body: object) -> None:
        super().__init__(daemon=True)
        self.url, self.body = f"{base_url}/v1/responses", {"model": MODEL, "input": f"tokens {tokens}",
                                                              "stream": True} | body
        self.response_id = ""
        self.created, self.delta = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            with httpx2.stream("POST", self.url, json=self.body, timeout=60) as stream:
                for line in stream.iter_lines():
                    if line.startswith("data: ") and not self.created.is_set():
                        self.response_id = json.loads(line.removeprefix("data: "))["response"]["id"]
                        self.created.set()
                    if line == "event: response.output_text.delta":
                        self.delta.set()
        except httpx2.HTTPError:
            pass  # cut: its API was killed

    def started(self) -> Streamed:
        self.start()
        assert self.created.wait(30), "the response was not created"
        return self


def _kill(api: ServiceProcess) -> float:
    """SIGKILL, as the OOM killer sends it; when."""
    killed = time.monotonic()
    api.send_signal(signal.SIGKILL)
    api.wait(timeout=STOPPED_WITHIN_S)
    return killed


def test_kill_api_cancels_its_foreground_responses_only(
    slow_settings: Settings, tmp_path: Path, started: list[ServiceProcess]
) -> None:
    """Its streaming client is cut off as on a SIGTERM, which cancels that response: a killed process cancelled
    nothing, and it ran to its end (30 s here) for nobody. Its background response runs for nobody in
    particular, and another replica's foreground response is not its to cancel: both run to their ends."""
    started.append(start_worker_process(slow_settings, tmp_path / "worker.log"))
    api, base_url = start_api_process(slow_settings, tmp_path / "api.log")
    other, other_url = start_api_process(slow_settings, tmp_path / "other-api.log")
    started.extend([api, other])
    killed_ones = Streamed(base_url, 600).started()  # 30 s of answer
    background = Streamed(base_url, 300, background=True).started()  # 15 s: past a cancel's KILLED_WITHIN_S
    other_one = Streamed(other_url, 400).started()  # 20 s: still running once the killed one's are cancelled
    assert killed_ones.delta.wait(30) and background.delta.wait(30) and other_one.delta.wait(30)
    killed = _kill(api)
    assert _wait_ended(slow_settings, killed_ones.response_id, timeout=KILLED_WITHIN_S) == "cancelled"
    print(f"cancelled {time.monotonic() - killed:.2f}s after the SIGKILL")
    assert _wait_ended(slow_settings, background.response_id, timeout=40) == "completed"
    assert _wait_ended(slow_settings, other_one.response_id, timeout=30) == "completed"


def test_kill_api_cancels_its_queued_foreground_response_unrun(
    slow_settings: Settings, tmp_path: Path, started: list[ServiceProcess], redis: redis_lib.Redis
) -> None:
    """Still queued when its API died (no worker yet): the worker that takes it cancels it instead of running it."""
    api, base_url = start_api_process(slow_settings, tmp_path / "api.log")
    started.append(api)
    queued = Streamed(base_url, 600).started()
    _kill(api)
    deadline = time.monotonic() + KILLED_WITHIN_S
    while list(redis.scan_iter(redis_keys.api_alive("*"))):  # its liveness key lapsed: it is known dead
        assert time.monotonic() < deadline
        time.sleep(0.1)
    started.append(start_worker_process(slow_settings, tmp_path / "worker.log"))
    assert _wait_ended(slow_settings, queued.response_id, timeout=30) == "cancelled"
    db = Database(slow_settings.database_url)
    try:
        with db.session() as session:
            stored = session.scalar(select(ResponseRow.response).where(ResponseRow.id == queued.response_id))
    finally:
        db.dispose()
    assert stored["output"] == []


def _wait_ended(settings: Settings, response_id: str, timeout: float) -> str:
    """The response's status in SQL once it ended, or as it is after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    db = Database(settings.database_url)
    try:
        while True:
            with db.session() as session:
                status = session.scalar(select(ResponseRow.status).where(ResponseRow.id == response_id))
            if status not in ("queued", "in_progress") or time.monotonic() > deadline:
                return str(status)
            time.sleep(0.1)
    finally:
        db.dispose()
