"""Engine throughput: raw vLLM ``AsyncLLM``, ``VllmEngine``, and the whole service, on the same requests.

Runs on the tiny random-weight gpt-oss model (built into a temp dir) unless ``--model`` names one.
Every path runs the same ``--concurrency`` requests ``Request n: tokens N``; their output is the
scripted engine's answer (an analysis message, then a final one of exactly N tokens), forced through
vLLM's sampler by the forcing logits processor, so each path generates the same tokens and stops on
``<|return|>``. Reported: generated tokens/s, time to first token and inter-token latency; the median
of ``--rounds`` rounds counts.

1. In this process, one engine: ``raw_asyncllm`` (AsyncLLM.generate, the script passed by hand) and
   ``vllm_engine`` (VllmEngine.generate from a thread per request), rounds alternating; then the
   engine is shut down (never two engines at once).
2. The service: redis-server, SQLite, an API process and a Celery worker process with
   ``engine=vllm`` and ``vllm_force_scripted`` (bench/_engine/traced_worker.py, which also records,
   for each event, the time from vLLM handing over the output to the event's write to Redis
   returning: the latency the worker adds). Clients POST ``stream: true`` and read the SSE stream,
   counting deltas; tokens are the completed responses' ``usage.output_tokens``.

    . .venv-engine/bin/activate && python bench/engine.py [--rounds 5] [--tokens 256]

The last line is the headline: ``engine_service_ratio: X`` (service end-to-end tokens/s over raw
AsyncLLM tokens/s; target >= 0.90).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "engine")]

from oss_responses.engine.base import SamplingSettings  # noqa: E402
from oss_responses.engine.forced import FORCED_TOKENS_KEY  # noqa: E402
from oss_responses.engine.vllm import ScriptedAnswers, VllmEngine, sampling_params  # noqa: E402


@dataclass
class Trace:
    """Output arrival times of one request."""

    start: float
    arrivals: list[float] = field(default_factory=list)
    tokens: int = 0


@dataclass
class Run:
    name: str
    seconds: float
    traces: list[Trace]

    @property
    def tokens_per_second(self) -> float:
        return sum(trace.tokens for trace in self.traces) / self.seconds


# (engine, loop running it, prompts, one sampling per prompt) -> one Trace per prompt
Scenario = Callable[
    [VllmEngine, asyncio.AbstractEventLoop, Sequence[list[int]], Sequence[SamplingSettings]], list[Trace]
]


def raw_asyncllm(engine: VllmEngine, loop: asyncio.AbstractEventLoop, prompts, samplings) -> list[Trace]:
    """The AsyncLLM itself, all requests gathered on its own loop."""
    from vllm.inputs import TokensPrompt

    async def one(n: int, prompt: list[int]) -> Trace:
        trace = Trace(time.perf_counter())
        params = sampling_params(samplings[n])
        request_id = f"raw-{n}-{time.time()}"
        async for output in engine.llm.generate(TokensPrompt(prompt_token_ids=prompt), params, request_id):
            trace.arrivals.append(time.perf_counter())
            trace.tokens += len(output.outputs[0].token_ids)
        return trace

    async def gather() -> list[Trace]:
        return list(await asyncio.gather(*(one(n, p) for n, p in enumerate(prompts))))

    return asyncio.run_coroutine_threadsafe(gather(), loop).result()


def via_engine(engine: VllmEngine, loop: asyncio.AbstractEventLoop, prompts, samplings) -> list[Trace]:
    """VllmEngine.generate, each request submitted from its own thread like a Celery task."""

    async def one(n: int, prompt: list[int]) -> Trace:
        trace = Trace(time.perf_counter())
        async for output in engine.generate(f"eng-{n}-{time.time()}", prompt, samplings[n]):
            trace.arrivals.append(time.perf_counter())
            trace.tokens += len(output.token_ids)
        return trace

    def submit(n: int, prompt: list[int]) -> Trace:
        return asyncio.run_coroutine_threadsafe(one(n, prompt), loop).result()

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(submit, range(len(prompts)), prompts))


SCENARIOS: dict[str, Scenario] = {"raw_asyncllm": raw_asyncllm, "vllm_engine": via_engine}
SERVICE_MODEL = "gpt-oss-20b"


def timed(name: str, scenario: Scenario, *args) -> Run:
    started = time.perf_counter()
    traces = scenario(*args)
    return Run(name, time.perf_counter() - started, traces)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def describe(runs: list[Run]) -> tuple[float, str]:
    median = sorted(runs, key=lambda run: run.tokens_per_second)[len(runs) // 2]
    ttft = [(trace.arrivals[0] - trace.start) * 1000 for trace in median.traces]
    itl = [(b - a) * 1000 for trace in median.traces for a, b in zip(trace.arrivals, trace.arrivals[1:])]
    rounds = ", ".join(f"{run.tokens_per_second:.0f}" for run in runs)
    line = (
        f"{median.name:>14}: {median.tokens_per_second:8.1f} tokens/s (rounds: {rounds}); "
        f"ttft p50 {percentile(ttft, 0.5):.1f} ms; "
        f"itl p50 {percentile(itl, 0.5):.2f} ms, p99 {percentile(itl, 0.99):.2f} ms"
    )
    return median.tokens_per_second, line


def user_texts(concurrency: int, tokens: int) -> list[str]:
    return [f"Request {n}: tokens {tokens}" for n in range(concurrency)]


def forced_requests(texts: Sequence[str]) -> tuple[list[list[int]], list[SamplingSettings]]:
    """Prompts and samplings carrying the script the service's worker computes for the same text."""
    from forced_harmony import prompt_for

    from oss_responses.harmony.vocab import load_encoding

    encoding = load_encoding(REPO / "var" / "tiktoken")
    answers, stops = ScriptedAnswers(encoding), tuple(encoding.stop_tokens_for_assistant_actions())
    prompts = [prompt_for(encoding, text) for text in texts]
    samplings = []
    for prompt in prompts:
        script = answers.script_for(prompt) or []
        samplings.append(SamplingSettings(max_tokens=len(script), stop_token_ids=stops, extra={FORCED_TOKENS_KEY: script}))
    return prompts, samplings


def start_engine(model: Path, concurrency: int) -> tuple[VllmEngine, asyncio.AbstractEventLoop]:
    from tiny_engine import tiny_settings

    settings = tiny_settings(model).model_copy(update={"worker_concurrency": concurrency})
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="engine-loop", daemon=True).start()
    engine = VllmEngine(settings)
    started = time.perf_counter()
    asyncio.run_coroutine_threadsafe(engine.start(), loop).result()
    print(f"engine start: {time.perf_counter() - started:.1f} s", flush=True)
    return engine, loop


def run_in_process(model: Path, args: argparse.Namespace) -> dict[str, tuple[float, str]]:
    """Phase 1: raw AsyncLLM and VllmEngine on one in-process engine, shut down at the end."""
    engine, loop = start_engine(model, args.concurrency)
    prompts, samplings = forced_requests(user_texts(args.concurrency, args.tokens))
    warm_prompts, warm_samplings = forced_requests(user_texts(args.concurrency, 8))
    try:
        for name, scenario in SCENARIOS.items():  # warm-up: fills the prefix cache for every scenario alike
            timed(name, scenario, engine, loop, warm_prompts, warm_samplings)
        runs: dict[str, list[Run]] = {name: [] for name in SCENARIOS}
        for _ in range(args.rounds):
            for name, scenario in SCENARIOS.items():
                runs[name].append(timed(name, scenario, engine, loop, prompts, samplings))
    finally:
        asyncio.run_coroutine_threadsafe(engine.shutdown(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
    return {name: describe(name_runs) for name, name_runs in runs.items()}


async def sse_request(client, url: str, text: str) -> Trace:
    """POST a streamed response; a Trace of its delta events, tokens = usage.output_tokens."""
    trace = Trace(time.perf_counter())
    body = {"model": SERVICE_MODEL, "input": text, "stream": True}
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        kind = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif not line.startswith("data: "):
                continue
            elif kind.endswith(".delta"):
                trace.arrivals.append(time.perf_counter())
            elif kind == "response.completed":
                trace.tokens = json.loads(line[6:])["response"]["usage"]["output_tokens"]
            elif kind in ("response.failed", "response.incomplete"):
                raise RuntimeError(f"a bench response did not complete: {line[:300]}")
    return trace


def service_round(base_url: str, texts: Sequence[str]) -> Run:
    import httpx2

    async def gather() -> list[Trace]:
        limits = httpx2.Limits(max_connections=len(texts) + 2)
        async with httpx2.AsyncClient(timeout=120, limits=limits) as client:
            url = f"{base_url}/v1/responses"
            return list(await asyncio.gather(*(sse_request(client, url, text) for text in texts)))

    started = time.perf_counter()
    traces = asyncio.run(gather())
    return Run("service", time.perf_counter() - started, traces)


def run_service(model: Path, scratch: Path, args: argparse.Namespace) -> tuple[tuple[float, str], list[float]]:
    """Phase 2: the service stack; its described median round and the worker's added latencies (s)."""
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "api")]
    from service_stack import start_api, start_vllm_worker, vllm_worker_env
    from support.servers import start_redis

    from api_server import stop_process
    from oss_responses.config import Settings
    from oss_responses.storage import migrate

    redis_server = start_redis()
    database = f"sqlite:///{scratch / 'bench.db'}"
    migrate(database)
    settings = Settings(database_url=database, redis_url=redis_server.url, models=[SERVICE_MODEL])
    trace_file = scratch / "worker-latency.txt"
    env = vllm_worker_env(settings, model, OSS_RESPONSES_VLLM_FORCE_SCRIPTED="true",
                          OSS_RESPONSES_WORKER_CONCURRENCY=str(args.concurrency), BENCH_TRACE_FILE=str(trace_file))
    processes = []
    try:
        started = time.perf_counter()
        processes.append(start_vllm_worker(settings, env, scratch / "worker.log", "bench._engine.traced_worker"))
        print(f"service worker start: {time.perf_counter() - started:.1f} s", flush=True)
        api, base_url = start_api(settings, scratch / "api.log")
        processes.append(api)
        service_round(base_url, user_texts(args.concurrency, 8))  # warm-up
        time.sleep(0.3)  # the trace thread writes every 0.1 s
        skip = len(trace_file.read_text().split()) if trace_file.exists() else 0
        runs = [service_round(base_url, user_texts(args.concurrency, args.tokens)) for _ in range(args.rounds)]
        time.sleep(0.3)
        latencies = [float(value) for value in trace_file.read_text().split()[skip:]]
    finally:
        for process in reversed(processes):
            stop_process(process)
        redis_server.stop()
    return describe(runs), latencies


def report(args: argparse.Namespace, in_process: dict[str, tuple[float, str]],
           service: tuple[float, str], latencies: list[float]) -> list[str]:
    raw = in_process["raw_asyncllm"][0]
    added_ms = [value * 1000 for value in latencies]
    return [
        f"{args.concurrency} concurrent requests x (analysis + {args.tokens} final tokens), "
        f"{args.rounds} rounds, median round:",
        *(line for _, line in in_process.values()),
        service[1],
        f"worker added latency (vLLM output -> event written to Redis), {len(added_ms)} events: "
        f"p50 {percentile(added_ms, 0.5):.2f} ms, p99 {percentile(added_ms, 0.99):.2f} ms",
        f"engine_ratio: {in_process['vllm_engine'][0] / raw:.3f}",
        f"engine_service_ratio: {service[0] / raw:.3f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="model folder (default: build the tiny gpt-oss)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as scratch:
        root = Path(scratch)
        for name, sub in (("VLLM_RPC_BASE_PATH", "rpc"), ("VLLM_CACHE_ROOT", "cache"), ("TMPDIR", "tmp")):
            (root / sub).mkdir()
            os.environ[name] = str(root / sub)
        model = args.model
        if model is None:
            from tiny_engine import build_tiny_gpt_oss

            model = build_tiny_gpt_oss(root / "model")
        in_process = run_in_process(model, args)
        service, latencies = run_service(model, root, args)
        lines = report(args, in_process, service, latencies)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
