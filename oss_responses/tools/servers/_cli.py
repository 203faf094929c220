"""The command line shared by the demo servers: ``--host``, ``--port``, ``--transport``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from mcp.server import MCPServer


def serve(server: MCPServer, argv: Sequence[str] | None = None, *, default_port: int) -> None:
    parser = argparse.ArgumentParser(description=f"The {server.name} demo MCP server")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (0.0.0.0 in containers)")
    parser.add_argument("--port", type=int, default=default_port)
    parser.add_argument(
        "--transport",
        choices=["streamable-http", "sse"],
        default="streamable-http",
        help="streamable-http serves /mcp; sse serves /sse (for older clients)",
    )
    args = parser.parse_args(argv)
    server.run(transport=args.transport, host=args.host, port=args.port)
