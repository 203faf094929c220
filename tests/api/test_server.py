"""The API's uvicorn server (``oss_responses/api/server.py``): idle, it wakes once a tick, not ten times a
second; asked to stop between ticks, it stops at once; its date header stays current."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from email.utils import parsedate_to_datetime

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from support.servers import START_TIMEOUT_S, free_port

from oss_responses.api.server import ApiServer


async def _ok(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


class _CountingServer(ApiServer):
    def __init__(self, config: uvicorn.Config, *, tick_seconds: float) -> None:
        super().__init__(config, tick_seconds=tick_seconds)
        self.ticks = 0

    async def on_tick(self, counter: int) -> bool:
        self.ticks += 1
        return await super().on_tick(counter)


Start = Callable[[float], tuple[_CountingServer, threading.Thread]]


@pytest.fixture
def run_server() -> Iterator[Start]:
    """Start a server (in a thread: uvicorn then installs no signal handlers) and stop it afterwards."""
    started: list[tuple[_CountingServer, threading.Thread]] = []

    def start(tick_seconds: float) -> tuple[_CountingServer, threading.Thread]:
        config = uvicorn.Config(_ok, host="127.0.0.1", port=free_port(), lifespan="off", log_config=None)
        server = _CountingServer(config, tick_seconds=tick_seconds)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        started.append((server, thread))
        return server, thread

    yield start
    for server, thread in started:
        server.handle_exit(signal.SIGTERM, None)
        thread.join(timeout=10)


def test_idle_server_wakes_once_a_tick(run_server: Start) -> None:
    server, _ = run_server(0.5)
    before, started = server.ticks, time.monotonic()
    time.sleep(2.0)
    ticks, elapsed = server.ticks - before, time.monotonic() - started
    # uvicorn's own loop would have ticked 20 times. Bounded by the time that passed, not the sleep
    # asked for: a stalled machine wakes the sleep late.
    assert 1 <= ticks <= elapsed / 0.5 + 2


def test_stop_server_between_ticks_at_once(run_server: Start) -> None:
    server, thread = run_server(60.0)
    asked = time.monotonic()
    server.handle_exit(signal.SIGTERM, None)
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert time.monotonic() - asked < 5.0  # not the 60 s tick


def test_date_header_stays_current(run_server: Start) -> None:
    server, _ = run_server(0.2)
    time.sleep(3.5)
    headers = dict(server.server_state.default_headers)
    age = time.time() - parsedate_to_datetime(headers[b"date"].decode()).timestamp()
    # At most a tick plus the header's whole second (1.2 s) when it is refreshed; 3.5 s when it is not.
    assert 0 <= age < 2.5
