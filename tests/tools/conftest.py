"""The demo MCP servers (and a misbehaving one) as real processes on loopback, and a session pool.

Servers are session-scoped: each starts once, on a free port, and is ready when its port accepts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from support.mcp import CALCULATOR, DOCUMENTS, MISBEHAVING, McpServerProcess, mcp_server

from oss_responses.tools.mcp_client import McpSessionPool


@pytest.fixture(scope="session")
def calculator_url() -> Iterator[str]:
    with mcp_server(*CALCULATOR) as url:
        yield url


@pytest.fixture(scope="session")
def documents_url() -> Iterator[str]:
    """The documents server over SSE, the transport of older servers."""
    with mcp_server(*DOCUMENTS, transport="sse") as url:
        yield url


@pytest.fixture(scope="session")
def misbehaving_url() -> Iterator[str]:
    with mcp_server(*MISBEHAVING) as url:
        yield url


@pytest.fixture
def own_calculator() -> Iterator[Callable[[str], McpServerProcess]]:
    """Start a calculator of the test's own, which it may stop and start again on its port:
    ``own_calculator("sse")``."""
    started: list[McpServerProcess] = []

    def start(transport: str) -> McpServerProcess:
        started.append(McpServerProcess(CALCULATOR, transport).start())
        return started[-1]

    yield start
    for calculator in started:
        calculator.stop()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def pool() -> AsyncIterator[McpSessionPool]:
    sessions = McpSessionPool(connect_timeout=5)
    yield sessions
    await sessions.close()
