"""A demo MCP server as a process of its own, on a free loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.servers import free_port

START_TIMEOUT_S = 20.0


@contextmanager
def demo_mcp_server(name: str, *, python: str = sys.executable, cwd: Path | None = None,
                    env: dict[str, str] | None = None) -> Iterator[str]:
    """``python -m oss_responses.tools.servers.<name>``; its Streamable HTTP URL while it runs."""
    port = free_port()
    proc = subprocess.Popen(
        [python, "-m", f"oss_responses.tools.servers.{name}", "--port", str(port)],
        cwd=cwd, env=os.environ if env is None else env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(proc, port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def wait_listening(proc: subprocess.Popen[bytes], port: int) -> None:
    """Until ``proc`` accepts connections on ``port`` (or fails, saying so)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the MCP server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"the MCP server did not listen within {START_TIMEOUT_S} s")
