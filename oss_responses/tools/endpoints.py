"""Where an MCP server is and what to send it: the policy's answer and the session pool's key.

Apart from :mod:`oss_responses.tools.mcp_client` so that the API, which checks servers but never
calls them, does not import the mcp SDK (about 2 s of every API process's start).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class McpEndpoint:
    """Where a server is and the headers to send; ``repr`` shows header names only."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    # Non-empty: connect to these addresses only, whatever the URL's host resolves to now (pinned_http.py).
    addresses: tuple[str, ...] = ()
    # Non-empty: the URL prefixes (the allow-list's) its requests must stay under, redirects included.
    within: tuple[str, ...] = ()
    # Whose session it is: a server's session state (Mcp-Session-Id) is never shared between API keys'
    # owners (one owner read back what another had stored on a stateful server).
    owner: str | None = None

    @property
    def transport(self) -> str:
        return "sse" if self.url.rstrip("/").endswith("/sse") else "streamable-http"

    @property
    def key(self) -> tuple[str, str]:
        digest = hashlib.sha256(
            json.dumps([sorted(self.headers.items()), self.addresses, self.owner]).encode()
        ).hexdigest()
        return (self.url, digest)

    def __repr__(self) -> str:
        return f"McpEndpoint(url={self.url!r}, headers={sorted(self.headers)!r}, addresses={self.addresses!r})"
