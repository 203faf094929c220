"""The session pool: reuse, isolation by headers, reconnection, failures."""

from __future__ import annotations

from typing import Any

import pytest

from oss_responses.tools.endpoints import McpEndpoint
from oss_responses.tools.mcp_client import McpSessionPool, McpUnavailable

pytestmark = pytest.mark.anyio


async def test_pool_reuses_session_for_two_calls(pool: McpSessionPool, calculator_url: str) -> None:
    endpoint = McpEndpoint(calculator_url)
    first = await pool.client(endpoint)
    await pool.call_tool(endpoint, "calculate", {"expression": "1+1"}, timeout=5)
    await pool.call_tool(endpoint, "calculate", {"expression": "2+2"}, timeout=5)
    assert await pool.client(endpoint) is first


async def test_pool_separates_sessions_by_headers(pool: McpSessionPool, calculator_url: str) -> None:
    alice = await pool.client(McpEndpoint(calculator_url, {"Authorization": "Bearer alice"}))
    bob = await pool.client(McpEndpoint(calculator_url, {"Authorization": "Bearer bob"}))
    assert alice is not bob


async def test_pool_sends_endpoint_headers(pool: McpSessionPool, misbehaving_url: str) -> None:
    endpoint = McpEndpoint(misbehaving_url, {"Authorization": "Bearer s3cret"})
    result = await pool.call_tool(endpoint, "authorization", {}, timeout=5)
    assert result.content[0].text == "Bearer s3cret"  # type: ignore[union-attr]


def test_endpoint_repr_hides_header_values() -> None:
    endpoint = McpEndpoint("http://mcp.example/mcp", {"Authorization": "Bearer s3cret"})
    assert "s3cret" not in repr(endpoint)
    assert "Authorization" in repr(endpoint)


async def test_pool_lists_tools_as_specs(pool: McpSessionPool, calculator_url: str) -> None:
    tools = await pool.list_tools(McpEndpoint(calculator_url), timeout=5)
    python = next(tool for tool in tools if tool.name == "python")
    assert python.input_schema["required"] == ["code"]
    assert python.read_only is True


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_pool_calls_again_after_server_restart(pool: McpSessionPool, own_calculator: Any, transport: str) -> None:
    calculator = own_calculator(transport)
    endpoint = McpEndpoint(calculator.url)
    await pool.call_tool(endpoint, "calculate", {"expression": "1"}, timeout=5)
    calculator.restart()
    result = await pool.call_tool(endpoint, "calculate", {"expression": "6*7"}, timeout=5)
    assert result.content[0].text == "42"  # type: ignore[union-attr]


async def test_pool_replaces_session_that_died_with_its_server(pool: McpSessionPool, own_calculator: Any) -> None:
    """An SSE session lives in its connection; streamable HTTP (2026 protocol) keeps none to lose."""
    calculator = own_calculator("sse")
    endpoint = McpEndpoint(calculator.url)
    before = await pool.client(endpoint)
    calculator.restart()
    await pool.call_tool(endpoint, "calculate", {"expression": "1"}, timeout=5)
    assert await pool.client(endpoint) is not before


async def test_pool_raises_unavailable_for_closed_port(pool: McpSessionPool) -> None:
    with pytest.raises(McpUnavailable, match="cannot connect"):
        await pool.call_tool(McpEndpoint("http://127.0.0.1:1/mcp"), "x", {}, timeout=5)


async def test_pool_close_ends_sessions(calculator_url: str) -> None:
    pool = McpSessionPool()
    endpoint = McpEndpoint(calculator_url)
    first = await pool.client(endpoint)
    await pool.close()
    assert await pool.client(endpoint) is not first
    await pool.close()


def _renamed(url: str, host: str) -> str:
    return url.replace("127.0.0.1", host)


async def test_pool_pinned_endpoint_calls_tools(pool: McpSessionPool, misbehaving_url: str) -> None:
    # The demo servers refuse Host headers other than localhost (their own rebinding guard), so the
    # unresolvable-name case is in test_pinned_http.py; here the MCP session runs over a pinned client.
    endpoint = McpEndpoint(_renamed(misbehaving_url, "localhost"), addresses=("127.0.0.1",))
    result = await pool.call_tool(endpoint, "host", {}, timeout=10)
    assert result.content[0].text.startswith("localhost:")  # type: ignore[union-attr]


async def test_pool_pinned_endpoint_ignores_what_the_name_resolves_to_now(
    pool: McpSessionPool, calculator_url: str
) -> None:
    # "localhost" resolves to the listening calculator, but the check pinned 127.0.0.2, where nothing listens.
    endpoint = McpEndpoint(_renamed(calculator_url, "localhost"), addresses=("127.0.0.2",))
    with pytest.raises(McpUnavailable, match="cannot connect"):
        await pool.call_tool(endpoint, "calculate", {"expression": "1+1"}, timeout=10)


async def test_pool_pinned_endpoint_over_sse(pool: McpSessionPool, documents_url: str) -> None:
    endpoint = McpEndpoint(_renamed(documents_url, "localhost"), addresses=("127.0.0.1",))
    assert await pool.list_tools(endpoint, timeout=10)
