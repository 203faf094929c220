"""An MCP server for tests: a slow tool, a crashing tool, and one that echoes the Authorization header.

``python tests/tools/misbehaving_server.py --port N``
"""

from __future__ import annotations

import asyncio
import sys

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from oss_responses.tools.servers._cli import serve


def build_server() -> MCPServer:
    server = MCPServer("misbehaving")

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
    serve(build_server(), sys.argv[1:], default_port=0)
