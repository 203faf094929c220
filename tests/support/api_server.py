"""The API under uvicorn in a thread of the test process, on a free port (the API tests' server;
the service as real processes is in :mod:`support.processes`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn

from oss_responses.api import create_app
from oss_responses.config import Settings
from oss_responses.http_protocol import server_options
from oss_responses.storage import Database
from support.servers import START_TIMEOUT_S, free_port


@dataclass
class ApiServer:
    settings: Settings
    base_url: str
    db: Database


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets=None) -> None:  # type: ignore[no-untyped-def]
        await super().startup(sockets)
        self.ready.set()


def serve_in_thread(settings: Settings) -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning",
                            **server_options(settings))
    server = _Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    if not server.ready.wait(START_TIMEOUT_S) or not server.started:
        server.should_exit = True
        raise RuntimeError("the API did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
