"""Added latency of one tool turn: the model's python call → its output back, through McpToolExecutor.

Starts the calculator MCP server on loopback, then times ``executor.call("code_interpreter",
"python", "123*456\\n")`` on a session reused across calls (the worker's pool) and on a fresh
connection per call (a new pool each time: connect, call, close).

    PYTHONPATH=.:tests python bench/tool_turn.py [--calls 300] [--transport streamable-http|sse]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from _common import percentile
from support.mcp import CALCULATOR, McpServerProcess

from oss_responses.tools.executor import McpToolExecutor, ToolOutcome
from oss_responses.tools.mcp_client import McpSessionPool
from oss_responses.tools.policy import ResolvedServer

EXPECTED = ToolOutcome(output="56088\n")


async def timed(calls: int, one_call: Callable[[], Awaitable[ToolOutcome]]) -> list[float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        outcome = await one_call()
        samples.append((time.perf_counter() - start) * 1000)
        assert outcome == EXPECTED, outcome
    return samples


def summary(name: str, samples: list[float]) -> tuple[float, float]:
    p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
    print(f"{name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, mean {statistics.fmean(samples):.2f} ms (n={len(samples)})")
    return p50, p99


async def run(url: str, calls: int) -> float:
    servers = [ResolvedServer("code_interpreter", url, builtin="python")]
    pool = McpSessionPool()
    reused = McpToolExecutor(pool, servers, timeout=10)
    await timed(20, lambda: reused.call("code_interpreter", "python", "123*456\n"))  # warm-up
    reused_samples = await timed(calls, lambda: reused.call("code_interpreter", "python", "123*456\n"))
    reused_p50, _ = summary("reused session", reused_samples)
    await pool.close()

    async def fresh_call() -> ToolOutcome:
        fresh_pool = McpSessionPool()
        try:
            executor = McpToolExecutor(fresh_pool, servers, timeout=10)
            return await executor.call("code_interpreter", "python", "123*456\n")
        finally:
            await fresh_pool.close()

    summary("fresh connection (connect + call + close)", await timed(max(calls // 5, 20), fresh_call))
    return reused_p50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--transport", choices=["streamable-http", "sse"], default="streamable-http")
    args = parser.parse_args()
    calculator = McpServerProcess(CALCULATOR, args.transport).start()
    try:
        print(f"calculator over {args.transport} at {calculator.url}")
        reused_p50 = asyncio.run(run(calculator.url, args.calls))
    finally:
        calculator.stop()
    print(f"tool_call_reused_p50: {reused_p50:.2f} ms")


if __name__ == "__main__":
    main()
