"""McpToolExecutor: every tool call ends in a ToolOutcome, built-in labels map onto their servers."""

from __future__ import annotations

import asyncio

import mcp_types
import pytest
from openai.types.responses.tool import Mcp
from prometheus_client import REGISTRY

from oss_responses.config import Settings
from oss_responses.tools.executor import McpToolExecutor, ToolOutcome, result_text
from oss_responses.tools.mcp_client import McpSessionPool
from oss_responses.tools.policy import ResolvedServer, resolve_servers

pytestmark = pytest.mark.anyio


@pytest.fixture
def servers(calculator_url: str, documents_url: str, misbehaving_url: str) -> list[ResolvedServer]:
    return [
        ResolvedServer("code_interpreter", calculator_url, builtin="python"),
        ResolvedServer("web_search_preview", documents_url, builtin="browser"),
        ResolvedServer("calc", calculator_url, allowed_tools=["calculate"]),
        ResolvedServer("flaky", misbehaving_url),
        ResolvedServer("gone", "http://127.0.0.1:1/mcp"),
    ]


@pytest.fixture
def executor(pool: McpSessionPool, servers: list[ResolvedServer]) -> McpToolExecutor:
    # Calls that should succeed get a timeout no stalled machine reaches.
    return McpToolExecutor(pool, servers, timeout=30.0)


@pytest.fixture
def impatient(pool: McpSessionPool, servers: list[ResolvedServer]) -> McpToolExecutor:
    """The same pool and servers, for the calls meant to time out (their tool sleeps 30 s)."""
    return McpToolExecutor(pool, servers, timeout=1.0)


async def test_call_builtin_python_runs_code(executor: McpToolExecutor) -> None:
    assert await executor.call("code_interpreter", "python", "123*456\n") == ToolOutcome(output="56088\n")


async def test_call_builtin_browser_search_passes_json_arguments(executor: McpToolExecutor) -> None:
    outcome = await executor.call("web_search_preview", "search", '{"query": "harmony channels", "topn": 1}')
    assert outcome.output is not None and '"id": "harmony"' in outcome.output


async def test_call_mcp_tool_returns_output(executor: McpToolExecutor) -> None:
    assert await executor.call("calc", "calculate", '{"expression": "6*7"}') == ToolOutcome(output="42")


async def test_call_refused_input_is_error(executor: McpToolExecutor) -> None:
    outcome = await executor.call("code_interpreter", "python", "__import__('os')")
    assert outcome.output is None and "not allowed in arithmetic" in (outcome.error or "")


async def test_call_failing_tool_is_error(executor: McpToolExecutor) -> None:
    outcome = await executor.call("flaky", "crash", "{}")
    assert outcome.failed and "crash" in (outcome.error or "")


async def test_call_slow_tool_times_out_as_error(impatient: McpToolExecutor) -> None:
    outcome = await impatient.call("flaky", "sleep", '{"seconds": 30}')
    assert outcome.error == "the call to 'flaky.sleep' timed out after 1 s"


async def test_call_after_timeout_still_works(impatient: McpToolExecutor, executor: McpToolExecutor) -> None:
    assert (await impatient.call("flaky", "sleep", '{"seconds": 30}')).failed
    assert await executor.call("flaky", "sleep", '{"seconds": 0}') == ToolOutcome(output="awake")


async def test_call_unreachable_server_is_error(executor: McpToolExecutor) -> None:
    outcome = await executor.call("gone", "anything", "{}")
    assert (outcome.error or "").startswith("the MCP server 'gone' is unreachable")


async def test_call_invalid_json_arguments_is_error(executor: McpToolExecutor) -> None:
    outcome = await executor.call("calc", "calculate", '{"expression": ')
    assert (outcome.error or "").startswith("the arguments are not valid JSON")


async def test_call_tool_outside_allowed_tools_is_error(executor: McpToolExecutor) -> None:
    outcome = await executor.call("calc", "python", '{"code": "1"}')
    assert outcome.error == "the tool 'python' of 'calc' is not allowed in this response"


async def test_call_unknown_label_is_error(executor: McpToolExecutor) -> None:
    assert (await executor.call("nope", "x", "{}")).failed


async def test_call_unknown_tool_is_error(executor: McpToolExecutor) -> None:
    assert (await executor.call("flaky", "no_such_tool", "{}")).failed


async def test_list_tools_applies_allowed_tools(executor: McpToolExecutor) -> None:
    assert [tool.name for tool in await executor.list_tools("calc")] == ["calculate"]


async def test_call_cancelled_in_flight_raises_cancelled(executor: McpToolExecutor) -> None:
    task = asyncio.ensure_future(executor.call("flaky", "sleep", '{"seconds": 30}'))
    done, _ = await asyncio.wait({task}, timeout=0.3)
    assert not done  # the call is in flight on the server
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await executor.call("calc", "calculate", '{"expression": "1+1"}') == ToolOutcome(output="2")


async def test_call_to_request_server_url_labels_metrics_by_allowlist_prefix(
    pool: McpSessionPool, calculator_url: str
) -> None:
    # A request's own server_url comes with a label of the request's choosing: one per request would grow the
    # worker's /metrics by a histogram's 15 series each, for good.
    prefix = calculator_url.rsplit("/", 1)[0] + "/"
    settings = Settings(mcp_url_allowlist=[prefix], mcp_allow_private_urls=True)
    labels = ["chosen-by-request-1", "chosen-by-request-2"]
    tools = [Mcp(type="mcp", server_label=label, server_url=calculator_url) for label in labels]
    executor = McpToolExecutor(pool, await resolve_servers(tools, settings), timeout=30.0)
    before = REGISTRY.get_sample_value("oss_responses_mcp_call_seconds_count", {"server": prefix}) or 0.0
    for label in labels:
        assert await executor.call(label, "calculate", '{"expression": "6*7"}') == ToolOutcome(output="42")
    assert REGISTRY.get_sample_value("oss_responses_mcp_call_seconds_count", {"server": prefix}) == before + 2
    for label in labels:
        assert REGISTRY.get_sample_value("oss_responses_mcp_call_seconds_count", {"server": label}) is None


def test_result_text_notes_an_image_instead_of_its_base64() -> None:
    image = mcp_types.ImageContent(type="image", data="iVBORw0KGgo" * 10_000, mime_type="image/png")
    result = mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="a chart:"), image])
    assert result_text(result) == "a chart:\n[image (image/png) not shown: gpt-oss reads text only]"
