"""An httpx client that connects to addresses checked beforehand, never to what DNS says later.

A request's own MCP ``server_url`` is resolved once, when the policy checks it (``policy.py``); a
second lookup at connect time could answer differently (DNS rebinding: public when checked, loopback
when used). The client here swaps only the TCP destination: httpcore's network backend is asked for
``(host, port)`` and connects to one of the pinned addresses instead. Everything above TCP still uses
the URL's host: the ``Host`` header, TLS's SNI and certificate verification (httpcore takes
``server_hostname`` from the request's origin, not from the socket), so https works unchanged
(``tests/tools/test_pinned_http.py`` checks SNI and a wrong-name certificate over TLS). A
connection to any other host (a redirect off the origin) is refused, and proxies from the
environment are not used (a proxy would resolve the name itself). The mcp SDK follows a redirect
that stays on the origin whatever the client says, and its SSE transport posts to the path the server
names; a request is sent only under the allow-list prefixes the URL passed (``within``), so neither
can carry the request's credentials to a path of the origin that the
allow-list refused (``/admin`` beside an allowed ``/mcp/``).

It relies on one private attribute, ``AsyncHTTPTransport._pool`` (httpx2 has no public way to pass
a network backend); ``tests/tools/test_mcp_client.py`` fails if that changes.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Sequence

import httpcore2
import httpx2
from httpcore2._backends.auto import AutoBackend
from httpcore2._backends.base import AsyncNetworkStream
from mcp.shared._httpx_utils import McpHttpClientFactory

from oss_responses.tools.urls import UnsafeUrl, normalise_url


class PinnedBackend(AutoBackend):
    """Connects ``host`` to its pinned addresses, in order, and refuses every other host."""

    def __init__(self, host: str, addresses: Sequence[str]) -> None:
        self.host = host
        self.addresses = tuple(addresses)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        if host.strip("[]").lower() != self.host:
            raise httpcore2.ConnectError("this client connects to its pinned MCP server only")
        error: Exception | None = None
        for address in self.addresses:
            try:
                return await super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout, OSError) as exc:
                error = exc
        raise httpcore2.ConnectError(f"no pinned address accepted the connection ({type(error).__name__})")


def pinned_client_factory(
    url: str, addresses: Sequence[str], *, within: Sequence[str] = (), ssl_context: ssl.SSLContext | None = None
) -> McpHttpClientFactory:
    """An ``McpHttpClientFactory`` (the mcp SDK's signature) whose clients are pinned to ``addresses``
    and send requests only under the URL prefixes ``within`` (when given).

    ``ssl_context``: the system's trust store unless given (tests give one trusting their own CA).
    """
    host = normalise_url(url).host
    prefixes = [normalise_url(prefix) for prefix in within]

    async def stay_within(request: httpx2.Request) -> None:
        if not prefixes:
            return
        try:
            sent = normalise_url(str(request.url))
        except UnsafeUrl:
            sent = None
        if sent is None or not any(sent.under(prefix) for prefix in prefixes):
            raise httpx2.ConnectError("this client sends requests under its MCP server's allowed URLs only",
                                      request=request)

    def create(
        headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: httpx2.Auth | None = None
    ) -> httpx2.AsyncClient:
        transport = httpx2.AsyncHTTPTransport(trust_env=False)
        transport._pool = httpcore2.AsyncConnectionPool(  # private: see the module docstring
            ssl_context=ssl_context or httpx2.create_ssl_context(trust_env=False),
            network_backend=PinnedBackend(host, addresses),
        )
        return httpx2.AsyncClient(
            headers=headers, timeout=timeout or httpx2.Timeout(30.0, read=300.0), auth=auth,
            transport=transport, trust_env=False, event_hooks={"request": [stay_within]},
        )

    return create
