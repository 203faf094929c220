"""MCP servers as processes of their own, each on a free loopback port: the demo servers
(``oss_responses.tools.servers.*``) and ``tests/tools/misbehaving_server.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from support import REPO
from support.forked import ForkedProcess, can_fork_program
from support.servers import free_port, wait_for_port

CALCULATOR = ("-m", "oss_responses.tools.servers.calculator")
DOCUMENTS = ("-m", "oss_responses.tools.servers.documents")
# A slow tool, a crashing tool, a tool that echoes the Authorization header (and ``--list-delay``).
MISBEHAVING = (str(REPO / "tests" / "tools" / "misbehaving_server.py"),)
STOP_TIMEOUT_S = 10.0


@dataclass
class McpServerProcess:
    """``python *command --port PORT --transport TRANSPORT``; it may be stopped and started again on its port.

    ``env`` defaults to ours with the checkout on ``PYTHONPATH`` (the servers import ``oss_responses``).
    """

    command: Sequence[str]
    transport: str = "streamable-http"
    port: int = field(default_factory=free_port)
    python: str = sys.executable
    cwd: Path | None = REPO
    env: Mapping[str, str] | None = None
    process: subprocess.Popen[bytes] | ForkedProcess | None = None

    @property
    def url(self) -> str:
        """Its endpoint: ``/sse`` for the SSE transport, else Streamable HTTP's ``/mcp``."""
        return f"http://127.0.0.1:{self.port}/{'sse' if self.transport == 'sse' else 'mcp'}"

    def start(self) -> McpServerProcess:
        """Returns once the server accepts connections (or raises, saying why it did not).

        Forked from the tests' server (:mod:`support.forked`) when it runs in our interpreter, checkout and
        environment: executed, a demo server took ~1.5 s of CPU to listen."""
        env = {**os.environ, "PYTHONPATH": str(REPO)} if self.env is None else dict(self.env)
        argv = ["--port", str(self.port), "--transport", self.transport]
        if self.env is None and self.python == sys.executable and self.cwd == REPO and can_fork_program(env):
            self.process = ForkedProcess(self.command, argv, env, os.devnull)
        else:
            self.process = subprocess.Popen([self.python, *self.command, *argv], cwd=self.cwd, env=env,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(self.port, self.process, f"the MCP server {' '.join(self.command)}")
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self) -> None:
        """Stop it and start it again on the same port (a server restart, as its clients see it)."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def mcp_server(
    *command: str,
    transport: str = "streamable-http",
    python: str = sys.executable,
    cwd: Path | None = REPO,
    env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """An MCP server process while the block runs; its URL."""
    server = McpServerProcess(command, transport, python=python, cwd=cwd, env=env).start()
    try:
        yield server.url
    finally:
        server.stop()


def demo_mcp_server(
    name: str, *, python: str = sys.executable, cwd: Path | None = REPO, env: Mapping[str, str] | None = None
) -> AbstractContextManager[str]:
    """``python -m oss_responses.tools.servers.<name>`` (Streamable HTTP) while the block runs; its URL."""
    return mcp_server("-m", f"oss_responses.tools.servers.{name}", python=python, cwd=cwd, env=env)
