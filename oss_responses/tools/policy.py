"""Which MCP servers a request may use, and which of their tools need approval.

- A request's ``mcp`` tool names a ``server_label``. Operators configure servers by label
  (``settings.tool_servers``); a request may name such a label without a URL.
- A request's own ``server_url`` (one that is not the configured URL of its label) is normalised
  first (``tools/urls.py``: dot segments, percent-encoding, default ports, case, IPv6 and legacy IPv4
  forms, IDNA; userinfo refused) and used only if it falls under a prefix of
  ``settings.mcp_url_allowlist`` (normalised the same way: same scheme, host and port; path under the
  prefix's path at a segment boundary). Its host is resolved once; unless
  ``settings.mcp_allow_private_urls``, every address must be global (not loopback, private, link-local,
  multicast...). The connection is pinned to those addresses (``ResolvedServer.addresses``, see
  ``mcp_client.py``): a name that resolves elsewhere later (DNS rebinding) is never connected to there.
  The normalised URL is the one connected to, so the URL checked is the URL requested.
- Labels in ``settings.builtin_tool_labels`` are served as gpt-oss's built-in ``python`` / ``browser``
  tools; the request tool types ``code_interpreter`` / ``web_search_preview`` select those labels.
- Every refusal is a :class:`BadRequest` whose ``param`` points at the tool (``tools[2].server_url``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from openai.types.responses import WebSearchPreviewTool, WebSearchTool
from openai.types.responses.tool import (
    CodeInterpreter,
    Mcp,
    McpAllowedToolsMcpToolFilter,
    McpRequireApproval,
    McpRequireApprovalMcpToolApprovalFilterAlways,
    McpRequireApprovalMcpToolApprovalFilterNever,
)

from oss_responses.config import Settings
from oss_responses.errors import BadRequest
from oss_responses.harmony.builtin_tools import BUILTIN_NAMESPACES, RESERVED_NAMESPACES, TOOL_TYPES, Builtin
from oss_responses.harmony.mcp_tools import MCP_TOOL_NAME, McpToolSpec
from oss_responses.request_tools import CONNECTION_HEADERS
from oss_responses.tools.endpoints import McpEndpoint
from oss_responses.tools.urls import NormalUrl, UnsafeUrl, normalise_url

HostResolver = Callable[[str], Awaitable[list[str]]]

_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Harmony namespaces the model already uses; an MCP label with one of these names would be ambiguous.
_RESERVED_LABELS = RESERVED_NAMESPACES


@dataclass(frozen=True)
class ResolvedServer:
    """An MCP server a response may use. ``headers`` hold the credentials: never log or store them."""

    label: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    allowed_tools: list[str] | McpAllowedToolsMcpToolFilter | None = None
    require_approval: McpRequireApproval | None = None
    builtin: Builtin | None = None
    hosted: bool = False  # serves a hosted tool type (web_search, code_interpreter), not an MCP tool
    description: str | None = None
    # A request's own server_url: the addresses checked, the only ones connected to (empty: resolve freely),
    # and the allow-list's prefixes it passed, which its requests must stay under.
    addresses: tuple[str, ...] = ()
    within: tuple[str, ...] = ()
    owner: str | None = None  # the response's API key owner: its sessions are its own

    @property
    def metric_label(self) -> str:
        """The server as the MCP metrics' ``server`` label names it: a configured server by its label; a
        request's own server_url by the allow-list prefix it passed, since its label is the request's choice
        (a label per request would add a histogram's series per request, kept for the worker's life)."""
        return self.within[0] if self.within else self.label

    @property
    def endpoint(self) -> McpEndpoint:
        return McpEndpoint(self.url, self.headers, self.addresses, self.within, self.owner)


async def resolve_servers(
    tools: Sequence[Any], settings: Settings, *, resolve_host: HostResolver | None = None
) -> list[ResolvedServer]:
    """The MCP servers of a request's tools (other tool types are skipped), in order."""
    resolve = resolve_host or system_resolver
    servers: list[ResolvedServer] = []
    for index, tool in enumerate(tools):
        param = f"tools[{index}]"
        if isinstance(tool, Mcp):
            server = await _resolve_mcp(tool, param, settings, resolve)
        elif isinstance(tool, (CodeInterpreter, WebSearchPreviewTool, WebSearchTool)):
            server = _resolve_builtin_type(tool.type, param, settings)
        else:
            continue
        if any(existing.label == server.label for existing in servers):
            raise BadRequest(
                f"Invalid value for '{param}.server_label': the label '{server.label}' is used by two tools.",
                param=f"{param}.server_label",
            )
        servers.append(server)
    return servers


async def _resolve_mcp(tool: Mcp, param: str, settings: Settings, resolve: HostResolver) -> ResolvedServer:
    label = tool.server_label
    builtin = _builtin_of(label, settings)
    if not _LABEL.match(label) or (label in _RESERVED_LABELS and builtin is None):
        raise BadRequest(
            f"Invalid value for '{param}.server_label': '{label}' must be 1-64 letters, digits, '_' or '-', "
            f"and not one of {sorted(_RESERVED_LABELS)}.",
            param=f"{param}.server_label",
        )
    if tool.connector_id is not None:
        raise BadRequest(
            f"Invalid value for '{param}.connector_id': connectors are not supported; give a server_url or "
            "a configured server_label.",
            param=f"{param}.connector_id",
        )
    configured = settings.tool_servers.get(label)
    url = tool.server_url or configured
    if url is None:
        raise BadRequest(
            f"Missing '{param}.server_url': no MCP server is configured for the label '{label}' "
            f"(configured: {sorted(settings.tool_servers) or 'none'}).",
            param=f"{param}.server_url",
        )
    addresses: tuple[str, ...] = ()
    within: tuple[str, ...] = ()
    if url != configured:
        checked = await check_request_url(url, f"{param}.server_url", settings, resolve)
        url, addresses, within = str(checked.url), checked.addresses, checked.within
    return ResolvedServer(
        label=label,
        url=url,
        addresses=addresses,
        within=within,
        headers=_headers(tool),
        allowed_tools=tool.allowed_tools,
        require_approval=tool.require_approval,
        builtin=builtin,
        description=tool.server_description,
    )


def _resolve_builtin_type(tool_type: str, param: str, settings: Settings) -> ResolvedServer:
    """A hosted tool type served by the MCP server of a built-in label; the label is the tool's type.

    The server configured for the type's own label wins, then any label of the same built-in (so
    ``web_search`` uses the ``web_search_preview`` server when only that one is configured).
    """
    builtin = TOOL_TYPES[tool_type]
    labels = [tool_type] + [label for label, name in settings.builtin_tool_labels.items() if name == builtin]
    for label in labels:
        if label in settings.tool_servers:
            return ResolvedServer(label=tool_type, url=settings.tool_servers[label], builtin=builtin, hosted=True)
    raise BadRequest(
        f"Invalid value for '{param}.type': no tool server is configured for '{tool_type}' on this service "
        f"(its {builtin} backend: set OSS_RESPONSES_TOOL_SERVERS).",
        param=f"{param}.type",
        code="unsupported_value",
    )


def _builtin_of(label: str, settings: Settings) -> Builtin | None:
    name = settings.builtin_tool_labels.get(label)
    return name if name in BUILTIN_NAMESPACES else None


def _headers(tool: Mcp) -> dict[str, str]:
    # Refused at create (request_tools.py); dropped here too, for a request stored before that check.
    headers = {name: value for name, value in (tool.headers or {}).items() if name.lower() not in CONNECTION_HEADERS}
    if tool.authorization:
        headers["Authorization"] = f"Bearer {tool.authorization}"
    return headers


@dataclass(frozen=True)
class CheckedUrl:
    url: NormalUrl
    addresses: tuple[str, ...]  # what the host resolved to when checked: the connection uses these only
    within: tuple[str, ...]  # the allow-list's prefixes the URL is under: its requests stay under them


async def check_request_url(url: str, param: str, settings: Settings, resolve: HostResolver) -> CheckedUrl:
    """The normalised URL and its host's addresses; BadRequest unless a request may send tool calls there."""
    try:
        target = normalise_url(url)
    except UnsafeUrl as exc:
        raise BadRequest(f"Invalid value for '{param}': an MCP server_url must be an http(s) URL; {exc}.",
                         param=param) from exc
    within = tuple(str(prefix) for prefix in _allowlist(settings) if target.under(prefix))
    if not within:
        raise BadRequest(
            f"Invalid value for '{param}': this server_url is not in the service's MCP allow-list "
            "(OSS_RESPONSES_MCP_URL_ALLOWLIST); use a configured server_label instead.",
            param=param,
        )
    try:
        addresses = [target.host] if target.is_ip else await resolve(target.host)
    except OSError as exc:
        raise BadRequest(f"Invalid value for '{param}': cannot resolve the host '{target.host}'.", param=param) from exc
    private = [address for address in addresses if not _is_public(address)]
    if not addresses or (private and not settings.mcp_allow_private_urls):
        raise BadRequest(
            f"Invalid value for '{param}': the host '{target.host}' is a loopback or private address "
            f"({', '.join(private) or 'none resolved'}); such MCP servers are refused "
            "(OSS_RESPONSES_MCP_ALLOW_PRIVATE_URLS).",
            param=param,
        )
    return CheckedUrl(target, tuple(addresses), within)


def _allowlist(settings: Settings) -> list[NormalUrl]:
    prefixes = []
    for prefix in settings.mcp_url_allowlist:
        try:
            prefixes.append(normalise_url(prefix))
        except UnsafeUrl:
            continue  # an operator's typo allows nothing rather than failing every request
    return prefixes


# IPv6 prefixes whose addresses carry an IPv4 address in their last 32 bits: NAT64's well-known and
# local-use prefixes (RFC 6052, RFC 8215). Through a translator they reach that IPv4 address.
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_site_local:  # deprecated (RFC 3879), not in is_global's list before Python 3.13
            return False
        if (embedded := _embedded_ipv4(ip)) is not None:
            return _is_public(str(embedded)) and not any(ip in prefix for prefix in _NAT64[1:])
    return ip.is_global and not ip.is_multicast


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for: mapped, 6to4, NAT64, or IPv4-compatible (``::a.b.c.d``)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in prefix for prefix in _NAT64) or (int(ip) >> 32 == 0 and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


async def system_resolver(host: str) -> list[str]:
    """Every address the host name resolves to."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


# --- allowed tools and approvals -------------------------------------------------------------


def is_tool_allowed(server: ResolvedServer, tool: McpToolSpec) -> bool:
    allowed = server.allowed_tools
    if allowed is None:
        return True
    if isinstance(allowed, list):
        return tool.name in allowed
    return _filter_matches(allowed.tool_names, allowed.read_only, tool, empty_matches=True)


def allowed_tools(server: ResolvedServer, tools: Sequence[McpToolSpec]) -> list[McpToolSpec]:
    """The tools of a server the model may see and call (``allowed_tools`` applied; a name the model
    could not write in a recipient is left out)."""
    return [tool for tool in tools if is_tool_allowed(server, tool) and MCP_TOOL_NAME.match(tool.name)]


def requires_approval(server: ResolvedServer, tool: McpToolSpec) -> bool:
    """Whether a call needs an ``mcp_approval_request`` first.

    Unset means "always", as in OpenAI's API, except for built-in labels (python, browser), which
    OpenAI runs without approval too. In a per-tool filter, ``never`` wins over ``always``; a tool
    matched by neither needs approval.
    """
    policy = server.require_approval
    if policy is None:
        return server.builtin is None
    if isinstance(policy, str):
        return policy == "always"
    return not _filter_matches_approval(policy.never, tool)


def _filter_matches_approval(
    flt: McpRequireApprovalMcpToolApprovalFilterAlways | McpRequireApprovalMcpToolApprovalFilterNever | None,
    tool: McpToolSpec,
) -> bool:
    return flt is not None and _filter_matches(flt.tool_names, flt.read_only, tool, empty_matches=False)


def _filter_matches(
    tool_names: list[str] | None, read_only: bool | None, tool: McpToolSpec, *, empty_matches: bool
) -> bool:
    """A tool filter: every criterion given must hold; a filter with none matches ``empty_matches``."""
    if tool_names is None and read_only is None:
        return empty_matches
    if tool_names is not None and tool.name not in tool_names:
        return False
    return read_only is None or bool(tool.read_only) == read_only
