"""The calculator MCP server: safe arithmetic, and the backend of gpt-oss's built-in ``python`` tool.

``python -m oss_responses.tools.servers.calculator --port 8811 [--transport sse]``

The ``python`` tool takes the code the model wrote and returns what a REPL would print, but only for
arithmetic (see :mod:`.arithmetic`): the model's ``123*456`` gives ``56088\\n``.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from oss_responses.tools.servers._cli import serve
from oss_responses.tools.servers.arithmetic import ArithmeticRefused, evaluate, run_program

DEFAULT_PORT = 8811
_READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True)


def build_server() -> MCPServer:
    server = MCPServer("calculator", instructions="Evaluates arithmetic: numbers, + - * / // % ** and parentheses.")

    @server.tool(annotations=_READ_ONLY, structured_output=False)
    def calculate(expression: str) -> str:
        """Evaluate one arithmetic expression, e.g. "(2 + 3) * 4 ** 2"."""
        try:
            return repr(evaluate(expression))
        except ArithmeticRefused as exc:
            raise ToolError(str(exc)) from exc

    @server.tool(annotations=_READ_ONLY, structured_output=False)
    def python(code: str) -> str:
        """Run arithmetic written as Python (one expression per line, print() allowed); returns the output."""
        try:
            return run_program(code)
        except ArithmeticRefused as exc:
            raise ToolError(str(exc)) from exc

    return server


def main(argv: Sequence[str] | None = None) -> None:
    serve(build_server(), argv, default_port=DEFAULT_PORT)


if __name__ == "__main__":
    main()
