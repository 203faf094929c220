"""An API server per test: the real app under uvicorn (in a thread) on a free port, its own database
(SQLite and PostgreSQL, from ``database_url``) and the session's redis-server; clients are the
official ``openai`` SDK and a raw ``httpx2`` client for what the SDK would never send.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from openai import OpenAI
from support import MODEL
from support.api_server import ApiServer, serve_in_thread
from support.key_clients import KeyClient, KeyClients
from support.processes import ServiceProcess, stop_process
from support.sdk import http_client, sdk_client

from oss_responses.config import Settings
from oss_responses.sealing import new_key
from oss_responses.storage import Database


@pytest.fixture
def settings(database_url: str, redis_url: str) -> Settings:
    # The API resolves MCP servers when it accepts a request: "calc" is configured (nothing listens there).
    # A sealing key: MCP credentials are accepted (kept sealed in the row).
    return Settings(database_url=database_url, redis_url=redis_url, models=[MODEL, "gpt-oss-120b"],
                    tool_servers={"calc": "https://calc.example/mcp"}, encryption_keys=[new_key()])


@pytest.fixture
def api(settings: Settings, redis) -> Iterator[ApiServer]:  # type: ignore[no-untyped-def]
    db = Database(settings.database_url)
    for base_url in serve_in_thread(settings):
        yield ApiServer(settings=settings, base_url=base_url, db=db)
    db.dispose()


@pytest.fixture
def started() -> Iterator[list[ServiceProcess]]:
    """Service processes a test starts (``support.processes``), stopped after it."""
    processes: list[ServiceProcess] = []
    yield processes
    for process in processes:
        stop_process(process)


@pytest.fixture
def address(api: ApiServer) -> tuple[str, int]:
    """The API's host and port, for a raw socket."""
    host, port = api.base_url.removeprefix("http://").split(":")
    return host, int(port)


@pytest.fixture
def client(api: ApiServer) -> Iterator[OpenAI]:
    with sdk_client(f"{api.base_url}/v1", max_retries=0, timeout=20) as sdk:
        yield sdk


@pytest.fixture
def http(api: ApiServer) -> Iterator[httpx2.Client]:
    with http_client(base_url=api.base_url, timeout=20) as raw:
        yield raw


@pytest.fixture
def keys(api: ApiServer) -> Iterator[KeyClients]:
    """Makes API keys and clients holding them (for a module whose ``settings`` has ``auth="keys"``)."""
    clients = KeyClients(api)
    yield clients
    clients.close()


@pytest.fixture
def alice(keys: KeyClients) -> KeyClient:
    """A key of owner "alice" (a module whose ``settings`` has ``auth="keys"``)."""
    return keys.new("alice")


@pytest.fixture
def bob(keys: KeyClients) -> KeyClient:
    return keys.new("bob")
