"""The API under uvicorn in a thread of the test process, on a free port (the API tests' server;
the service as real processes is in :mod:`support.processes`)."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

from oss_responses.api import create_app
from oss_responses.api.server import ApiServer as _ProductServer
from oss_responses.config import Settings
from oss_responses.http_protocol import server_options
from oss_responses.storage import Database
from support.servers import START_TIMEOUT_S, free_port


@dataclass
class ApiServer:
    settings: Settings
    base_url: str
    db: Database


class _Server(_ProductServer):
    """The service's own server (a stop request wakes its main loop at once), which also says when it
    listens, and whose stop skips uvicorn's fixed 0.1 s wait for open connections when none is open.

    A test's server stopped in ~0.2 s, 4 ms of it work: uvicorn's main loop looked for the stop request
    every 0.1 s and its shutdown then waited 0.1 s for connections to close whether or not any were
    open. Over the ~1,200 tests that start one that was ~4 minutes of the suite's test processes."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.server_state.connections or self.server_state.tasks:
            await super().shutdown(sockets)
            return
        # uvicorn's shutdown less the wait for connections, since there are none
        for server in self.servers:
            server.close()
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()


def serve_in_thread(settings: Settings, app: ASGIApp | None = None) -> Iterator[str]:
    """The API's app (or ``app``) served as the API serves it (its connections' options); its base URL."""
    port = free_port()
    config = uvicorn.Config(app or create_app(settings), host="127.0.0.1", port=port, log_level="warning",
                            **server_options(settings))
    server = _Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    if not server.ready.wait(START_TIMEOUT_S) or not server.started:
        server.handle_exit(signal.SIGTERM, None)
        raise RuntimeError("the API did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.handle_exit(signal.SIGTERM, None)
        thread.join(timeout=10)
