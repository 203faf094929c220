"""The pinned httpx client: TCP goes to the checked addresses, the URL's host stays in Host."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx2
import pytest

from oss_responses.tools.pinned_http import pinned_client_factory

pytestmark = pytest.mark.anyio


async def _echo_host(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    host = next(line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.lower().startswith("host:"))
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(host), host.encode()))
    await writer.drain()
    writer.close()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(_echo_host, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def test_pinned_client_connects_unresolvable_name_to_pinned_address(echo_port: int) -> None:
    url = f"http://pinned.invalid:{echo_port}/mcp"
    async with pinned_client_factory(url, ["127.0.0.1"])() as client:
        response = await client.get(url)
    assert response.text == f"pinned.invalid:{echo_port}"


async def test_pinned_client_tries_next_address_when_first_refuses(echo_port: int) -> None:
    url = f"http://pinned.invalid:{echo_port}/"
    async with pinned_client_factory(url, ["127.0.0.2", "127.0.0.1"])() as client:
        assert (await client.get(url)).status_code == 200


async def test_pinned_client_refuses_other_hosts(echo_port: int) -> None:
    url = f"http://pinned.invalid:{echo_port}/"
    async with pinned_client_factory(url, ["127.0.0.1"])() as client:
        with pytest.raises(httpx2.ConnectError):
            await client.get(f"http://127.0.0.1:{echo_port}/")
