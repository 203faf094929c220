"""Doctor fixtures: settings on the test stores, and a demo MCP server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.mcp import demo_mcp_server
from support.servers import start_redis

from oss_responses.config import Settings


@pytest.fixture
def settings(database_url: str, redis_url: str, tmp_path: Path) -> Settings:
    """A healthy deployment but for the test Redis, which keeps no AOF."""
    return Settings(database_url=database_url, redis_url=redis_url, tiktoken_dir=tmp_path / "tiktoken")


@pytest.fixture(scope="session")
def calculator_url() -> Iterator[str]:
    with demo_mcp_server("calculator") as url:
        yield url


@pytest.fixture
def own_redis_url() -> Iterator[str]:
    """A redis-server of the test's own: no other test's workers announced themselves there."""
    server = start_redis()
    try:
        yield server.url
    finally:
        server.stop()
