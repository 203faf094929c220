"""Which MCP servers a request may use, allowed_tools, and approvals."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import FunctionTool, WebSearchPreviewTool
from openai.types.responses.tool import CodeInterpreter, Mcp

from oss_responses.config import Settings
from oss_responses.errors import BadRequest
from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.tools.policy import (
    ResolvedServer,
    allowed_tools,
    requires_approval,
    resolve_servers,
)

pytestmark = pytest.mark.anyio


def _settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "tool_servers": {"code_interpreter": "http://calc:8811/mcp", "docs": "http://docs:8812/sse"},
        "mcp_url_allowlist": ["https://mcp.example.com/", "http://127.0.0.1:9000/mcp"],
        "mcp_allow_private_urls": False,
    }
    return Settings(**{**values, **overrides})


def _mcp(**fields: Any) -> Mcp:
    return Mcp.model_validate({"type": "mcp", "server_label": "remote", **fields})


async def _public(host: str) -> list[str]:
    return {"mcp.example.com": ["93.184.215.14"], "inside.example.com": ["10.1.2.3"]}[host]


async def _resolve(*tools: Any, settings: Settings | None = None) -> list[ResolvedServer]:
    return await resolve_servers(list(tools), settings or _settings(), resolve_host=_public)


async def test_resolve_configured_label_without_url() -> None:
    [server] = await _resolve(_mcp(server_label="docs"))
    assert (server.label, server.url, server.builtin) == ("docs", "http://docs:8812/sse", None)


async def test_resolve_builtin_label_marks_builtin() -> None:
    [server] = await _resolve(_mcp(server_label="code_interpreter"))
    assert server.builtin == "python"


async def test_resolve_code_interpreter_tool_type_uses_configured_label() -> None:
    [server] = await _resolve(CodeInterpreter.model_validate({"type": "code_interpreter", "container": "auto"}))
    assert (server.label, server.builtin) == ("code_interpreter", "python")


async def test_resolve_builtin_tool_type_without_server_is_refused() -> None:
    with pytest.raises(BadRequest, match="no tool server is configured for 'web_search_preview'") as info:
        await _resolve(WebSearchPreviewTool(type="web_search_preview"))
    assert info.value.param == "tools[0].type"


async def test_resolve_skips_function_tools() -> None:
    function = FunctionTool(type="function", name="f", parameters={}, strict=False)
    servers = await _resolve(function, _mcp(server_label="docs"))
    assert [server.label for server in servers] == ["docs"]


async def test_resolve_allowlisted_public_url() -> None:
    [server] = await _resolve(_mcp(server_url="https://mcp.example.com/v1/mcp"))
    assert server.url == "https://mcp.example.com/v1/mcp"


async def test_resolve_unknown_label_without_url_is_refused() -> None:
    with pytest.raises(BadRequest, match="no MCP server is configured for the label 'remote'") as info:
        await _resolve(_mcp())
    assert info.value.param == "tools[0].server_url"


@pytest.mark.parametrize(
    "url",
    ["https://evil.example.org/mcp", "https://mcp.example.com.evil.org/mcp", "http://mcp.example.com/mcp"],
)
async def test_resolve_url_outside_allowlist_is_refused(url: str) -> None:
    with pytest.raises(BadRequest, match="not in the service's MCP allow-list") as info:
        await _resolve(FunctionTool(type="function", name="f", parameters={}, strict=False), _mcp(server_url=url))
    assert info.value.param == "tools[1].server_url"


async def test_resolve_other_url_for_configured_label_is_checked() -> None:
    with pytest.raises(BadRequest, match="allow-list"):
        await _resolve(_mcp(server_label="docs", server_url="http://attacker.example/sse"))


async def test_resolve_loopback_url_is_refused() -> None:
    with pytest.raises(BadRequest, match="loopback or private address \\(127.0.0.1\\)"):
        await _resolve(_mcp(server_url="http://127.0.0.1:9000/mcp"))


async def test_resolve_hostname_resolving_to_private_address_is_refused() -> None:
    settings = _settings(mcp_url_allowlist=["https://inside.example.com/"])
    with pytest.raises(BadRequest, match="10.1.2.3"):
        await _resolve(_mcp(server_url="https://inside.example.com/mcp"), settings=settings)


async def test_resolve_localhost_name_is_refused_by_real_resolver() -> None:
    settings = _settings(mcp_url_allowlist=["http://localhost:9000/"])
    with pytest.raises(BadRequest, match="loopback or private"):
        await resolve_servers([_mcp(server_url="http://localhost:9000/mcp")], settings)


async def test_resolve_loopback_url_allowed_when_private_urls_allowed() -> None:
    settings = _settings(mcp_allow_private_urls=True)
    [server] = await _resolve(_mcp(server_url="http://127.0.0.1:9000/mcp"), settings=settings)
    assert server.url == "http://127.0.0.1:9000/mcp"


async def test_resolve_url_with_credentials_is_refused() -> None:
    with pytest.raises(BadRequest, match="credentials in the URL"):
        await _resolve(_mcp(server_url="https://user:pw@mcp.example.com/mcp"))


@pytest.mark.parametrize("label", ["functions", "bad.label", "has space"])
async def test_resolve_invalid_label_is_refused(label: str) -> None:
    with pytest.raises(BadRequest, match="server_label"):
        await _resolve(_mcp(server_label=label, server_url="https://mcp.example.com/mcp"))


async def test_resolve_duplicate_label_is_refused() -> None:
    with pytest.raises(BadRequest, match="used by two tools") as info:
        await _resolve(_mcp(server_label="docs"), _mcp(server_label="docs"))
    assert info.value.param == "tools[1].server_label"


async def test_resolve_authorization_becomes_bearer_header_hidden_from_repr() -> None:
    [server] = await _resolve(_mcp(server_label="docs", authorization="s3cret", headers={"X-Team": "a"}))
    assert server.headers == {"X-Team": "a", "Authorization": "Bearer s3cret"}
    assert "s3cret" not in repr(server)


async def test_resolve_drops_headers_that_route_the_request() -> None:
    """A request stored before such headers were refused at create: its ``Host`` took the server's address to
    another virtual host."""
    [server] = await _resolve(_mcp(server_label="docs", headers={"Host": "admin.internal", "X-Team": "a",
                                                                 "transfer-encoding": "chunked"}))
    assert server.headers == {"X-Team": "a"}


# --- allowed_tools and approvals ---------------------------------------------------------

READ = McpToolSpec("search", annotations={"readOnlyHint": True})  # as a server lists it
WRITE = McpToolSpec("delete", annotations={"read_only_hint": False})  # as listings stored before 2026-12-04
PLAIN = McpToolSpec("ping")


def _server(**fields: Any) -> ResolvedServer:
    return ResolvedServer(label="docs", url="http://docs/mcp", **fields)


def _names(tools: list[McpToolSpec]) -> list[str]:
    return [tool.name for tool in tools]


@pytest.mark.parametrize(
    ("allowed", "names"),
    [
        (None, ["search", "delete", "ping"]),
        (["ping", "missing"], ["ping"]),
        ({"tool_names": ["search", "delete"]}, ["search", "delete"]),
        ({"read_only": True}, ["search"]),
        ({"tool_names": ["search", "delete"], "read_only": False}, ["delete"]),
    ],
)
def test_allowed_tools_filters_tools(allowed: Any, names: list[str]) -> None:
    tool = Mcp.model_validate({"type": "mcp", "server_label": "x", "allowed_tools": allowed})
    server = _server(allowed_tools=tool.allowed_tools)
    assert _names(allowed_tools(server, [READ, WRITE, PLAIN])) == names


def test_allowed_tools_leave_out_names_no_recipient_can_hold() -> None:
    listed = [McpToolSpec(name) for name in ("with space", "a<|end|>", "x" * 129, "get.data", "ok-1_2")]
    assert _names(allowed_tools(_server(), listed)) == ["get.data", "ok-1_2"]


def _approval(policy: Any) -> ResolvedServer:
    tool = Mcp.model_validate({"type": "mcp", "server_label": "x", "require_approval": policy})
    return _server(require_approval=tool.require_approval)


def test_requires_approval_by_default() -> None:
    assert requires_approval(_server(), PLAIN)


def test_requires_approval_not_for_builtin_label_by_default() -> None:
    assert not requires_approval(_server(builtin="python"), PLAIN)


@pytest.mark.parametrize(("policy", "expected"), [("always", True), ("never", False)])
def test_requires_approval_follows_always_and_never(policy: str, expected: bool) -> None:
    assert requires_approval(_approval(policy), PLAIN) is expected


def test_requires_approval_never_filter_exempts_named_tools() -> None:
    server = _approval({"never": {"tool_names": ["search"]}})
    assert [requires_approval(server, tool) for tool in (READ, WRITE, PLAIN)] == [False, True, True]


def test_requires_approval_never_filter_exempts_read_only_tools() -> None:
    server = _approval({"never": {"read_only": True}, "always": {"tool_names": ["delete"]}})
    assert [requires_approval(server, tool) for tool in (READ, WRITE, PLAIN)] == [False, True, True]


# --- server_url normalisation before the allow-list (tools/urls.py) ---------------------------

_ALLOWED = ["https://allowed.example/mcp/", "http://[2606:4700::1111]:8080/mcp", "https://bücher.example/mcp"]


async def _public_anywhere(host: str) -> list[str]:
    return ["93.184.215.14"]


async def _resolve_allowed(url: str) -> ResolvedServer:
    settings = _settings(mcp_url_allowlist=_ALLOWED, mcp_allow_private_urls=False)
    [server] = await resolve_servers([_mcp(server_url=url)], settings, resolve_host=_public_anywhere)
    return server


@pytest.mark.parametrize(
    ("url", "connected"),
    [
        ("https://allowed.example/mcp/", "https://allowed.example/mcp/"),
        ("HTTPS://ALLOWED.Example/mcp/tools", "https://allowed.example/mcp/tools"),
        ("https://allowed.example:443/mcp", "https://allowed.example/mcp"),
        ("https://allowed.example./mcp/x", "https://allowed.example/mcp/x"),
        ("https://allowed.example/mcp/./a/../b", "https://allowed.example/mcp/b"),
        ("https://allowed.example/mcp/%61pi", "https://allowed.example/mcp/api"),
        ("https://allowed.example/mcp/a%7eb", "https://allowed.example/mcp/a~b"),
        ("https://allowed.example/mcp/q?x=%2e%2e", "https://allowed.example/mcp/q?x=%2e%2e"),
        ("http://[2606:4700:0000::1111]:8080/mcp", "http://[2606:4700::1111]:8080/mcp"),
        ("https://xn--bcher-kva.example/mcp", "https://xn--bcher-kva.example/mcp"),
        ("https://BÜCHER.example/mcp", "https://xn--bcher-kva.example/mcp"),
    ],
)
async def test_resolve_allowlisted_url_is_normalised(url: str, connected: str) -> None:
    server = await _resolve_allowed(url)
    assert server.url == connected
    assert server.addresses == ("93.184.215.14",) or server.addresses == ("2606:4700::1111",)


@pytest.mark.parametrize(
    "url",
    [
        "https://allowed.example/mcp/../admin",
        "https://allowed.example/mcp/%2e%2e/admin",
        "https://allowed.example/mcp/%2E%2e/admin",
        "https://allowed.example/mcp/.%2e/admin",
        "https://allowed.example/mcp/a/../../admin",
        "https://allowed.example/mcp/..",
        "https://allowed.example/mcpadmin",
        "https://allowed.example/MCP/",
        "https://allowed.example:8443/mcp/",
        "http://allowed.example/mcp/",
        "https://allowed.example.evil.org/mcp/",
        "http://[2606:4700::1112]:8080/mcp",
        "http://[2606:4700::1111]/mcp",
    ],
)
async def test_resolve_url_escaping_allowlist_is_refused(url: str) -> None:
    with pytest.raises(BadRequest, match="not in the service's MCP allow-list"):
        await _resolve_allowed(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://user@allowed.example/mcp/",
        "https://allowed.example@evil.org/mcp/",
        "https://:pw@allowed.example/mcp/",
        "https://allowed.example/mcp/..%2fadmin",
        "https://allowed.example/mcp/..%5Cadmin",
        "https://allowed.example/mcp\\..\\admin",
        "https://allowed.example/mcp/ x",
        "https://allowed.example/mcp/\x00",
        "https://allowed.example:99999/mcp/",
        "http://[fe80::1%25eth0]:8080/mcp",
        "https://allowed.example\uff0fmcp/",  # NFKC makes it a '/': Python's urlsplit raised ValueError, a 500
        "https://allowed\u2100example/mcp/",  # '\u2100' is 'a/c'
        "https://[allowed.example/mcp/",
        "ftp://allowed.example/mcp/",
        "//allowed.example/mcp/",
    ],
)
async def test_resolve_url_without_canonical_form_is_refused(url: str) -> None:
    with pytest.raises(BadRequest, match="an MCP server_url must be an http\\(s\\) URL") as info:
        await _resolve_allowed(url)
    assert info.value.param == "tools[0].server_url"


@pytest.mark.parametrize(
    "url",
    ["http://127.1:9000/mcp", "http://0x7f.0.0.1:9000/mcp", "http://2130706433:9000/mcp", "http://[::ffff:127.0.0.1]:9000/mcp"],
)
async def test_resolve_legacy_loopback_forms_are_refused(url: str) -> None:
    settings = _settings(mcp_url_allowlist=["http://127.0.0.1:9000/mcp", "http://[::ffff:7f00:1]:9000/mcp"])
    with pytest.raises(BadRequest, match="loopback or private address"):
        await resolve_servers([_mcp(server_url=url)], settings, resolve_host=_public_anywhere)


@pytest.mark.parametrize("address", [
    "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::a00:1",  # NAT64: loopback, metadata, local-use prefix
    "2002:7f00:1::", "2002:a9fe:a9fe::",  # 6to4 of loopback and link-local
    "::127.0.0.1", "::a00:1",  # IPv4-compatible
    "fec0::1",  # site-local
])
async def test_resolve_ipv6_standing_for_private_address_is_refused(address: str) -> None:
    url = f"http://[{address}]:9000/mcp"
    settings = _settings(mcp_url_allowlist=[url])
    with pytest.raises(BadRequest, match="loopback or private address"):
        await resolve_servers([_mcp(server_url=url)], settings, resolve_host=_public_anywhere)


@pytest.mark.parametrize("address", ["64:ff9b::5db8:d70e", "2002:5db8:d70e::", "2606:4700::1111"])
async def test_resolve_ipv6_standing_for_public_address_is_accepted(address: str) -> None:
    url = f"http://[{address}]:9000/mcp"
    [server] = await resolve_servers([_mcp(server_url=url)], _settings(mcp_url_allowlist=[url]),
                                     resolve_host=_public_anywhere)
    assert server.endpoint.addresses == (address,)


async def test_resolve_request_url_pins_resolved_addresses() -> None:
    server = await _resolve_allowed("https://allowed.example/mcp/")
    assert server.endpoint.addresses == ("93.184.215.14",)


async def test_resolve_request_url_keeps_the_allowed_prefixes_it_is_under() -> None:
    settings = _settings(mcp_url_allowlist=["https://allowed.example/mcp/", "https://allowed.example/",
                                            "https://other.example/"])
    [server] = await resolve_servers([_mcp(server_url="https://allowed.example/mcp/x")], settings,
                                     resolve_host=_public_anywhere)
    assert server.endpoint.within == ("https://allowed.example/mcp/", "https://allowed.example/")


async def test_resolve_configured_server_is_not_pinned() -> None:
    [server] = await _resolve(_mcp(server_label="docs"))
    assert server.endpoint.addresses == ()
