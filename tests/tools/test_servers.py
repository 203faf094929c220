"""The demo MCP servers, called over the wire with the mcp SDK's client."""

from __future__ import annotations

import json

import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp_types import TextContent

pytestmark = pytest.mark.anyio


def _text(result) -> str:  # type: ignore[no-untyped-def]
    assert isinstance(result.content[0], TextContent)
    return result.content[0].text


async def test_calculator_python_tool_prints_product(calculator_url: str) -> None:
    async with Client(calculator_url) as client:
        result = await client.call_tool("python", {"code": "123*456\n"})
    assert (result.is_error, _text(result)) == (False, "56088\n")


async def test_calculator_calculate_tool_returns_value(calculator_url: str) -> None:
    async with Client(calculator_url) as client:
        result = await client.call_tool("calculate", {"expression": "(2 + 3) * 4 ** 2"})
    assert _text(result) == "80"


@pytest.mark.parametrize("code", ["__import__('os').system('id')", "open('/etc/passwd')", "x + 1", "9 ** 9 ** 9"])
async def test_calculator_refuses_non_arithmetic(calculator_url: str, code: str) -> None:
    async with Client(calculator_url) as client:
        result = await client.call_tool("python", {"code": code})
    assert result.is_error
    assert "not allowed" in _text(result) or "larger" in _text(result)


async def test_calculator_lists_read_only_tools(calculator_url: str) -> None:
    async with Client(calculator_url) as client:
        tools = (await client.list_tools()).tools
    assert {tool.name for tool in tools} == {"calculate", "python"}
    assert all(tool.annotations and tool.annotations.read_only_hint for tool in tools)


async def test_documents_search_returns_matches_with_ids_and_urls(documents_url: str) -> None:
    async with Client(sse_client(documents_url)) as client:
        result = await client.call_tool("search", {"query": "Model Context Protocol tools"})
    hits = json.loads(_text(result))
    assert (hits[0]["id"], hits[0]["url"]) == ("mcp", "https://modelcontextprotocol.io")
    assert {"id", "title", "url", "snippet"} <= hits[0].keys()


async def test_documents_fetch_returns_text(documents_url: str) -> None:
    async with Client(sse_client(documents_url)) as client:
        result = await client.call_tool("fetch", {"id": "harmony"})
    assert _text(result).startswith("# The harmony format\n")


async def test_documents_fetch_unknown_id_is_error(documents_url: str) -> None:
    async with Client(sse_client(documents_url)) as client:
        result = await client.call_tool("fetch", {"id": "nope"})
    assert result.is_error
    assert "no document with id 'nope'" in _text(result)


async def test_documents_find_returns_matching_lines(documents_url: str) -> None:
    async with Client(sse_client(documents_url)) as client:
        result = await client.call_tool("find", {"pattern": "<|call|>"})
    assert _text(result).startswith("[harmony] L1:")
