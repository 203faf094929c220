"""Check of the configured MCP servers (``OSS_RESPONSES_TOOL_SERVERS``): each connects and lists tools."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from oss_responses.config import Settings
from oss_responses.doctor.report import CheckResult
from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.logs import safe_url
from oss_responses.tools.endpoints import McpEndpoint
from oss_responses.tools.mcp_client import McpSessionPool, McpUnavailable

TIMEOUT_SECONDS = 5.0


def check_tool_servers(settings: Settings) -> Iterator[CheckResult]:
    if not settings.tool_servers:
        yield CheckResult("mcp servers", "ok", "none configured (only requests' own allowed server_url)")
        return
    listings = asyncio.run(_list_every_server(settings.tool_servers))
    for label, url in settings.tool_servers.items():
        yield _listing_result(label, safe_url(url), listings[label])


def _listing_result(label: str, url: str, listing: list[McpToolSpec] | BaseException) -> CheckResult:
    name = f"mcp server {label}"
    if isinstance(listing, BaseException):
        return CheckResult(name, "FAIL", f"{url}: {_reason(listing)}; start it or fix OSS_RESPONSES_TOOL_SERVERS")
    names = ", ".join(tool.name for tool in listing[:8]) + (", ..." if len(listing) > 8 else "")
    return CheckResult(name, "ok", f"{url}: {len(listing)} tools ({names})")


async def _list_every_server(servers: dict[str, str]) -> dict[str, list[McpToolSpec] | BaseException]:
    pool = McpSessionPool(connect_timeout=TIMEOUT_SECONDS)
    try:
        listings = await asyncio.gather(
            *(pool.list_tools(McpEndpoint(url), TIMEOUT_SECONDS) for url in servers.values()), return_exceptions=True
        )
    finally:
        await pool.close()
    return dict(zip(servers, listings, strict=True))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no tool list within {TIMEOUT_SECONDS:g} s"
    if isinstance(exc, McpUnavailable):
        return str(exc)  # written to hold no URL or header
    return f"cannot list tools ({type(exc).__name__})"
