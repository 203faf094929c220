"""Memory over many responses: does an API process or a worker keep something of each response it served?

The whole stack (``_service/stack.py``: redis-server, SQLite or PostgreSQL, one API process, one Celery
worker with the scripted engine at full speed) serves ``--responses`` short responses through the openai
SDK, ``--concurrency`` at a time, of seven kinds in turn: streamed; background and polled; continued by
``previous_response_id``; streamed with ``store: false``; waited for, then an earlier one's stream replayed
(``GET ?stream=true``); over the Responses WebSocket (``client.responses.connect()``), one connection per
lane open for the whole run as Codex keeps its own, ``store: false``, every other one continuing the one before
by id (the connection's cache); and one that calls a tool of an MCP server (the demo calculator, configured as
``calc``: its tools listed, one call, its result fed back), the worker's MCP sessions reused across responses.
Every ``--every`` responses it prints the resident memory of the API and the worker
and Redis's ``used_memory``. A process that keeps something per response grows with the count; caches
fill during the first checkpoints (the worker's rendered-message cache, SQLAlchemy's statement cache,
pydantic's), so the growth is counted from the first checkpoint past a third of the run, and so are the
garbage-collection passes of the two processes (``_gc_log/sitecustomize.py`` logs them): a response whose
objects hold each other in a cycle is freed only by such a pass, which stops the whole process meanwhile.
Redis keeps each stored response's log tombstone for the event TTL (a day by default) and a ``store:
false`` one's whole stream for ``OSS_RESPONSES_UNSTORED_EVENT_TTL_SECONDS`` (5 minutes): its bytes per
response served are printed too. The headline is the last line.

    PYTHONPATH=.:tests python bench/memory_growth.py [--responses 12000] [--concurrency 16] [--database postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import openai
import redis as redis_lib
from _common import rss_kib
from _service.stack import SERVED, Stack, api_pids, start_stack
from openai.resources.responses.responses import AsyncResponsesConnection
from support.mcp import CALCULATOR, mcp_server

KINDS = 7
MCP = {"type": "mcp", "server_label": "calc", "require_approval": "never"}
GC_LOG = Path(__file__).parent / "_gc_log"  # its sitecustomize logs the service processes' collections


@dataclass
class Checkpoint:
    responses: int
    api_kib: int
    worker_kib: int
    redis_bytes: int
    seconds: float
    at: float  # wall time, as the garbage-collection log has it


@dataclass
class Lane:
    """One client's state: its last stored response, and its WebSocket with the last response made there."""

    socket: AsyncResponsesConnection
    earlier: str | None = None
    on_socket: str | None = None  # the last response made over the socket, while the next one continues it


async def over_socket(lane: Lane) -> bool:
    """A ``store: false`` turn over the lane's socket; every other one continues the one before by id (two
    turns, then a fresh conversation: a conversation that grew all run would grow the processes with it)."""
    continued = {"previous_response_id": lane.on_socket} if lane.on_socket else {}
    await lane.socket.response.create(model=SERVED, input="tokens 30", store=False, **continued)
    while (event := await lane.socket.recv()).type not in ("response.completed", "response.failed",
                                                          "response.incomplete", "error"):
        pass
    lane.on_socket = event.response.id if event.type == "response.completed" and not continued else None
    return event.type == "response.completed"


async def one(client: openai.AsyncOpenAI, n: int, lane: Lane) -> bool:
    """Response ``n`` (its kind: ``n % KINDS``) on ``lane``; whether it completed."""
    if n % KINDS == 5:
        return await over_socket(lane)
    if n % KINDS == 6:
        return await with_mcp_call(client)
    response_id, completed = await over_http(client, n, lane.earlier)
    lane.earlier = response_id or lane.earlier
    return completed


async def over_http(client: openai.AsyncOpenAI, n: int, earlier: str | None) -> tuple[str | None, bool]:
    """Response ``n`` over HTTP; its id if stored, and whether it completed."""
    kind = n % KINDS
    if kind == 0:
        completed = None
        async for event in await client.responses.create(model=SERVED, input="tokens 40", stream=True):
            if event.type == "response.completed":
                completed = event.response
        return (completed.id, True) if completed is not None else (None, False)
    if kind == 1:
        response = await client.responses.create(model=SERVED, input="tokens 40", background=True)
        while response.status in ("queued", "in_progress"):
            await asyncio.sleep(0.05)
            response = await client.responses.retrieve(response.id)
        return response.id, response.status == "completed"
    if kind == 2 and earlier is not None:
        response = await client.responses.create(model=SERVED, input="tokens 30", previous_response_id=earlier)
        return response.id, response.status == "completed"
    if kind == 3:
        types = [event.type async for event in await client.responses.create(
            model=SERVED, input="tokens 30", stream=True, store=False)]
        return None, types[-1:] == ["response.completed"]
    response = await client.responses.create(model=SERVED, input="tokens 40")
    if earlier is not None:
        async for _ in await client.responses.retrieve(earlier, stream=True):
            pass
    return response.id, response.status == "completed"


async def with_mcp_call(client: openai.AsyncOpenAI) -> bool:
    """A response that calls the calculator over MCP; whether it completed with the call's result."""
    response = await client.responses.create(model=SERVED, input='call calc.calculate {"expression": "6*7"}',
                                             tools=[MCP])
    calls = [item for item in response.output if item.type == "mcp_call"]
    return response.status == "completed" and [call.output for call in calls] == ["42"]


def checkpoint(stack: Stack, redis: redis_lib.Redis, responses: int, started: float) -> Checkpoint:
    assert stack.worker is not None
    point = Checkpoint(responses, sum(rss_kib(pid) for pid in api_pids(stack.api.pid)), rss_kib(stack.worker.pid),
                       int(redis.info("memory")["used_memory"]), time.monotonic() - started, time.time())
    print(f"{point.responses:9,d}  {point.api_kib / 1024:9.1f}  {point.worker_kib / 1024:12.1f}  "
          f"{point.redis_bytes / 2**20:10.1f}  {point.seconds:7.0f}", flush=True)
    return point


async def serve(stack: Stack, total: int, concurrency: int, every: int) -> tuple[list[Checkpoint], int]:
    client = openai.AsyncOpenAI(base_url=f"http://{stack.host}:{stack.port}/v1", api_key="bench", max_retries=0)
    redis = redis_lib.Redis.from_url(stack.settings.redis_url)
    failed = done = 0
    async with AsyncExitStack() as sockets:
        # Each lane continues and replays its own last response, and keeps its socket for the whole run.
        lanes = [Lane(await sockets.enter_async_context(client.responses.connect())) for _ in range(concurrency)]
        started = time.monotonic()
        print("responses  API (MiB)  worker (MiB)  Redis (MiB)  seconds")
        points = [checkpoint(stack, redis, 0, started)]
        try:
            while done < total:
                results = await asyncio.gather(*(one(client, done + n, lane) for n, lane in enumerate(lanes)))
                failed += sum(not completed for completed in results)
                done += concurrency
                if done % every < concurrency:
                    points.append(checkpoint(stack, redis, done, started))
        finally:
            await client.close()
            redis.close()
    return points, failed


def collections_while_serving(log: Path, window: tuple[float, float]) -> str:
    """The garbage-collection passes ``log`` (one process's) recorded in ``window``, in a few words."""
    passes = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    during = [(int(gen), float(ms), int(collected)) for at, gen, ms, collected in passes
              if window[0] <= float(at) <= window[1]]
    if not during:
        return "none"
    longest = max(ms for _, ms, _ in during)
    return (f"{len(during)} (generations {sorted({gen for gen, _, _ in during})}), {sum(c for _, _, c in during):,} "
            f"objects collected, the longest {longest:.1f} ms")


def per_thousand(first: Checkpoint, last: Checkpoint, kib: str) -> float:
    return (getattr(last, kib) - getattr(first, kib)) / (last.responses - first.responses) * 1000


def measure(args: argparse.Namespace, calculator: str) -> tuple[list[Checkpoint], int, dict[str, int]]:
    """The run's checkpoints, how many responses did not complete, and the measured processes' pids."""
    stack = start_stack(args.database, tool_servers={"calc": calculator})
    try:
        stack.start_worker(args.concurrency, traced=False)
        assert stack.worker is not None
        pids = {"API": stack.api.pid, "worker": stack.worker.pid}
        points, failed = asyncio.run(serve(stack, args.responses, args.concurrency, args.every))
    finally:
        stack.stop()
    return points, failed, pids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--responses", type=int, default=12_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--every", type=int, default=2_000, help="responses between two checkpoints")
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    args = parser.parse_args()
    logs = tempfile.mkdtemp(prefix="oss-bench-gc-")
    os.environ["BENCH_GC_LOG"] = f"{logs}/gc"  # the service processes inherit both
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(GC_LOG), os.environ.get("PYTHONPATH")]))
    with mcp_server(*CALCULATOR) as calculator:
        points, failed, pids = measure(args, calculator)
    warm = next(point for point in points if point.responses >= args.responses / 3)
    last = points[-1]
    for name, pid in pids.items():
        print(f"garbage collection passes of the {name} after {warm.responses:,} responses: "
              f"{collections_while_serving(Path(f'{logs}/gc.{pid}'), (warm.at, last.at))}")
    shutil.rmtree(logs, ignore_errors=True)
    api, worker = per_thousand(warm, last, "api_kib"), per_thousand(warm, last, "worker_kib")
    redis_per_response = (last.redis_bytes - points[0].redis_bytes) / last.responses
    print(f"{last.responses:,} responses ({failed} not completed) in {last.seconds:.0f} s; database: {args.database}")
    print(f"after {warm.responses:,} responses: API {api:+.0f} KiB, worker {worker:+.0f} KiB per 1,000 more")
    print(f"Redis: {redis_per_response:,.0f} bytes per response served (a stored one's tombstone, kept the event TTL; "
          "a store=false one's whole stream, kept the unstored TTL)")
    print(f"rss_growth_per_1000_responses: {api + worker:.0f} KiB")


if __name__ == "__main__":
    main()
