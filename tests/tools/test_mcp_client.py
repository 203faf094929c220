"""The session pool: reuse, isolation by headers, reconnection, failures."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import Tool, ToolAnnotations
from mcp_types import INVALID_REQUEST

from oss_responses.tools.endpoints import McpEndpoint
from oss_responses.tools.mcp_client import McpSessionPool, McpUnavailable, tool_spec

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


async def test_pool_separates_sessions_by_owner(pool: McpSessionPool, calculator_url: str) -> None:
    """One owner read back what another had stored on a stateful server through a shared session."""
    alice = await pool.client(McpEndpoint(calculator_url, owner="alice"))
    bob = await pool.client(McpEndpoint(calculator_url, owner="bob"))
    assert alice is not bob
    assert await pool.client(McpEndpoint(calculator_url, owner="alice")) is alice


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


class _CutAfterSending(McpSessionPool):
    """A pool whose sessions' calls fail as given: what a connection broken midway raises."""

    def __init__(self, *errors: BaseException) -> None:
        super().__init__(connect_timeout=5)
        self.errors = list(errors)
        self.sent = 0

    async def client(self, endpoint: McpEndpoint) -> Any:
        return self

    async def _discard(self, endpoint: McpEndpoint, client: Any) -> None:
        pass

    async def call_tool_on_wire(self) -> str:
        self.sent += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ran"


def _call(pool: _CutAfterSending, *, resend: bool) -> Any:
    return pool._with_retry(McpEndpoint("http://tool.example/mcp"), 5, lambda _: pool.call_tool_on_wire(),
                            resend=resend)


async def test_call_cut_after_sending_is_not_sent_again_unless_idempotent() -> None:
    cut = httpx2.RemoteProtocolError("peer closed connection without sending complete message body")
    once = _CutAfterSending(cut)
    with pytest.raises(McpUnavailable, match="may have run"):
        await _call(once, resend=False)
    assert once.sent == 1
    twice = _CutAfterSending(cut)
    assert await _call(twice, resend=True) == "ran" and twice.sent == 2


@pytest.mark.parametrize("error", [httpx2.ConnectError("refused"),
                                   MCPError(code=INVALID_REQUEST, message="Session not found")])
async def test_call_the_server_cannot_have_run_is_sent_again(error: BaseException) -> None:
    pool = _CutAfterSending(error)
    assert await _call(pool, resend=False) == "ran" and pool.sent == 2


def test_tool_spec_keeps_annotations_under_mcp_names() -> None:
    # What OpenAI's mcp_list_tools items show: the server's JSON (readOnlyHint), not the SDK's attributes.
    tool = Tool(name="t", input_schema={"type": "object"},
                annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=False))
    spec = tool_spec(tool)
    assert spec.annotations == {"readOnlyHint": True, "idempotentHint": False}
    assert spec.read_only is True and spec.hint("idempotentHint") is False
