"""Added latency of one tool turn: the model's python call → its output back, through McpToolExecutor.

Starts the calculator MCP server on loopback, then times ``executor.call("code_interpreter",
"python", "123*456\\n")`` on a session reused across calls (the worker's pool) and on a fresh
connection per call (a new pool each time: connect, call, close).

    python bench/tool_turn.py [--calls 300] [--transport streamable-http|sse]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oss_responses.tools.executor import McpToolExecutor, ToolOutcome  # noqa: E402
from oss_responses.tools.mcp_client import McpSessionPool  # noqa: E402
from oss_responses.tools.policy import ResolvedServer  # noqa: E402

EXPECTED = ToolOutcome(output="56088\n")


def start_calculator(transport: str) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "oss_responses.tools.servers.calculator", "--port", str(port)]
    proc = subprocess.Popen([*command, "--transport", transport], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            path = "/sse" if transport == "sse" else "/mcp"
            return proc, f"http://127.0.0.1:{port}{path}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the calculator server did not start")


async def timed(calls: int, one_call: Callable[[], Awaitable[ToolOutcome]]) -> list[float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        outcome = await one_call()
        samples.append((time.perf_counter() - start) * 1000)
        assert outcome == EXPECTED, outcome
    return samples


def summary(name: str, samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    print(f"{name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, mean {statistics.fmean(ordered):.2f} ms (n={len(ordered)})")
    return p50, p99


async def run(url: str, calls: int) -> float:
    servers = [ResolvedServer("code_interpreter", url, builtin="python")]
    pool = McpSessionPool()
    reused = McpToolExecutor(pool, servers, timeout=10)
    await timed(20, lambda: reused.call("code_interpreter", "python", "123*456\n"))  # warm-up
    reused_p50, _ = summary("reused session", await timed(calls, lambda: reused.call("code_interpreter", "python", "123*456\n")))
    await pool.close()

    async def fresh_call() -> ToolOutcome:
        fresh_pool = McpSessionPool()
        try:
            return await McpToolExecutor(fresh_pool, servers, timeout=10).call("code_interpreter", "python", "123*456\n")
        finally:
            await fresh_pool.close()

    summary("fresh connection (connect + call + close)", await timed(max(calls // 5, 20), fresh_call))
    return reused_p50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--transport", choices=["streamable-http", "sse"], default="streamable-http")
    args = parser.parse_args()
    proc, url = start_calculator(args.transport)
    try:
        print(f"calculator over {args.transport} at {url}")
        reused_p50 = asyncio.run(run(url, args.calls))
    finally:
        proc.terminate()
        proc.wait()
    print(f"tool_call_reused_p50: {reused_p50:.2f} ms")


if __name__ == "__main__":
    main()
