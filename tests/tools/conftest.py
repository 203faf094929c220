"""The demo MCP servers (and a misbehaving one) as real processes on loopback, and a session pool.

Servers are session-scoped: each starts once, on a free port, and is ready when its port accepts.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from support.servers import free_port

from oss_responses.tools.mcp_client import McpSessionPool

START_TIMEOUT_S = 20.0
REPO_ROOT = Path(__file__).resolve().parents[2]


def start_mcp_server(
    command: list[str], transport: str = "streamable-http", port: int | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, *command, "--port", str(port), "--transport", transport],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{command} exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise TimeoutError(f"{command} did not listen within {START_TIMEOUT_S}s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def calculator_url() -> Iterator[str]:
    proc, port = start_mcp_server(CALCULATOR)
    yield f"http://127.0.0.1:{port}/mcp"
    stop(proc)


@pytest.fixture(scope="session")
def documents_url() -> Iterator[str]:
    """The documents server over SSE, the transport of older servers."""
    proc, port = start_mcp_server(["-m", "oss_responses.tools.servers.documents"], transport="sse")
    yield f"http://127.0.0.1:{port}/sse"
    stop(proc)


@pytest.fixture(scope="session")
def misbehaving_url() -> Iterator[str]:
    proc, port = start_mcp_server([str(Path(__file__).with_name("misbehaving_server.py"))])
    yield f"http://127.0.0.1:{port}/mcp"
    stop(proc)


CALCULATOR = ["-m", "oss_responses.tools.servers.calculator"]


class CalculatorProcess:
    """A calculator server of a test's own, which the test may stop and start again on its port."""

    def __init__(self, transport: str) -> None:
        self.transport = transport
        self.proc, self.port = start_mcp_server(CALCULATOR, transport)
        self.url = f"http://127.0.0.1:{self.port}/{'sse' if transport == 'sse' else 'mcp'}"

    def restart(self) -> None:
        stop(self.proc)
        self.proc, _ = start_mcp_server(CALCULATOR, self.transport, port=self.port)


@pytest.fixture
def own_calculator() -> Iterator[Callable[[str], CalculatorProcess]]:
    """Start a calculator of the test's own: ``own_calculator("sse")``."""
    started: list[CalculatorProcess] = []

    def start(transport: str) -> CalculatorProcess:
        started.append(CalculatorProcess(transport))
        return started[-1]

    yield start
    for calculator in started:
        stop(calculator.proc)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def pool() -> AsyncIterator[McpSessionPool]:
    sessions = McpSessionPool(connect_timeout=5)
    yield sessions
    await sessions.close()
