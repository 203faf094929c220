"""The doctor's check of the configured MCP servers, against the real demo calculator."""

from __future__ import annotations

from support.servers import free_port

from oss_responses.config import Settings
from oss_responses.doctor.tools import check_tool_servers


def test_check_tool_servers_lists_tools_of_each_server(calculator_url: str) -> None:
    [result] = check_tool_servers(Settings(tool_servers={"code_interpreter": calculator_url}))

    assert result.name == "mcp server code_interpreter"
    assert (result.status, result.detail) == ("ok", f"{calculator_url}: 2 tools (calculate, python)")


def test_check_tool_servers_fails_on_unreachable_server(calculator_url: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"

    results = list(check_tool_servers(Settings(tool_servers={"calc": calculator_url, "dead": dead})))

    assert [(r.name, r.status) for r in results] == [("mcp server calc", "ok"), ("mcp server dead", "FAIL")]
    assert "cannot connect" in results[1].detail


def test_check_tool_servers_passes_when_none_configured() -> None:
    [result] = check_tool_servers(Settings(tool_servers={}))

    assert result.status == "ok"
