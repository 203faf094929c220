"""An MCP server for tests: a slow tool, a crashing tool, and one that echoes the Authorization header.

``python tests/tools/misbehaving_server.py --port N [--list-delay SECONDS]`` (a slow tool listing).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from oss_responses.tools.servers._cli import serve


class _SlowListing(MCPServer):
    list_delay = 0.0

    async def list_tools(self):  # type: ignore[no-untyped-def]
        await asyncio.sleep(self.list_delay)
        return await super().list_tools()


def build_server(list_delay: float = 0.0) -> MCPServer:
    server = _SlowListing("misbehaving")
    server.list_delay = list_delay

    @server.tool(structured_output=False)
    async def sleep(seconds: float) -> str:
        """Answer after this many seconds."""
        await asyncio.sleep(seconds)
        return "awake"

    @server.tool(structured_output=False)
    def crash() -> str:
        """Always fails."""
        raise RuntimeError("boom")

    @server.tool(structured_output=False)
    def authorization(ctx: Context) -> str:
        """The Authorization header this call came with."""
        return (ctx.headers or {}).get("authorization", "")

    @server.tool(structured_output=False)
    def host(ctx: Context) -> str:
        """The Host header this call came with."""
        return (ctx.headers or {}).get("host", "")

    return server


if __name__ == "__main__":
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--list-delay", type=float, default=0.0)
    known, rest = options.parse_known_args(sys.argv[1:])
    serve(build_server(known.list_delay), rest, default_port=0)
