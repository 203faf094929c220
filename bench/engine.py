"""Engine throughput: raw vLLM ``AsyncLLM`` against the same requests through ``VllmEngine``.

Runs on the tiny random-weight gpt-oss model (built into a temp dir) unless ``--model`` names one.
Each scenario sends the same ``--concurrency`` prompts, each generating exactly ``--tokens`` tokens
(no stop tokens; the tokenizer is skipped, so there is no EOS), and reports tokens/s, time to first
token and inter-token latency. Rounds alternate between scenarios; the median round counts.

    . .venv-engine/bin/activate && python bench/engine.py [--rounds 5] [--tokens 256]

To compare another path (e.g. the service through Celery and Redis), add a coroutine with the
``Scenario`` signature to ``SCENARIOS``. The last line is the headline: ``engine_ratio: X``
(VllmEngine tokens/s over raw AsyncLLM tokens/s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
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
from oss_responses.engine.vllm import VllmEngine, sampling_params  # noqa: E402


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


# (engine, loop running it, prompts, sampling) -> one Trace per prompt
Scenario = Callable[[VllmEngine, asyncio.AbstractEventLoop, Sequence[list[int]], SamplingSettings], list[Trace]]


def raw_asyncllm(engine: VllmEngine, loop: asyncio.AbstractEventLoop, prompts, sampling) -> list[Trace]:
    """The AsyncLLM itself, all requests gathered on its own loop."""
    from vllm.inputs import TokensPrompt

    async def one(n: int, prompt: list[int]) -> Trace:
        trace = Trace(time.perf_counter())
        params = sampling_params(sampling)
        request_id = f"raw-{n}-{time.time()}"
        async for output in engine.llm.generate(TokensPrompt(prompt_token_ids=prompt), params, request_id):
            trace.arrivals.append(time.perf_counter())
            trace.tokens += len(output.outputs[0].token_ids)
        return trace

    async def gather() -> list[Trace]:
        return list(await asyncio.gather(*(one(n, p) for n, p in enumerate(prompts))))

    return asyncio.run_coroutine_threadsafe(gather(), loop).result()


def via_engine(engine: VllmEngine, loop: asyncio.AbstractEventLoop, prompts, sampling) -> list[Trace]:
    """VllmEngine.generate, each request submitted from its own thread like a Celery task."""

    async def one(n: int, prompt: list[int]) -> Trace:
        trace = Trace(time.perf_counter())
        async for output in engine.generate(f"eng-{n}-{time.time()}", prompt, sampling):
            trace.arrivals.append(time.perf_counter())
            trace.tokens += len(output.token_ids)
        return trace

    def submit(n: int, prompt: list[int]) -> Trace:
        return asyncio.run_coroutine_threadsafe(one(n, prompt), loop).result()

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(submit, range(len(prompts)), prompts))


SCENARIOS: dict[str, Scenario] = {"raw_asyncllm": raw_asyncllm, "vllm_engine": via_engine}


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


def prompts_for(concurrency: int) -> list[list[int]]:
    from forced_harmony import prompt_for

    from oss_responses.harmony.vocab import load_encoding

    encoding = load_encoding(REPO / "var" / "tiktoken")
    return [prompt_for(encoding, f"Request {n}: write a long story about the number {n}.") for n in range(concurrency)]


def start_engine(model: Path, concurrency: int) -> tuple[VllmEngine, asyncio.AbstractEventLoop]:
    from tiny_engine import tiny_settings

    settings = tiny_settings(model).model_copy(
        update={"worker_concurrency": concurrency, "vllm_engine_args": {"enforce_eager": True}}
    )
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="engine-loop", daemon=True).start()
    engine = VllmEngine(settings)
    started = time.perf_counter()
    asyncio.run_coroutine_threadsafe(engine.start(), loop).result()
    print(f"engine start: {time.perf_counter() - started:.1f} s", flush=True)
    return engine, loop


def run_on(model: Path, args: argparse.Namespace) -> list[str]:
    """The report's lines; printed by the caller once vLLM, which logs its shutdown, has stopped."""
    engine, loop = start_engine(model, args.concurrency)
    prompts = prompts_for(args.concurrency)
    sampling = SamplingSettings(max_tokens=args.tokens, seed=0)
    try:
        for name, scenario in SCENARIOS.items():  # warm-up: fills the prefix cache for every scenario alike
            timed(name, scenario, engine, loop, prompts, SamplingSettings(max_tokens=8))
        runs: dict[str, list[Run]] = {name: [] for name in SCENARIOS}
        for _ in range(args.rounds):
            for name, scenario in SCENARIOS.items():
                runs[name].append(timed(name, scenario, engine, loop, prompts, sampling))
    finally:
        asyncio.run_coroutine_threadsafe(engine.shutdown(), loop).result()
    described = {name: describe(name_runs) for name, name_runs in runs.items()}
    ratio = described["vllm_engine"][0] / described["raw_asyncllm"][0]
    return [
        f"{args.concurrency} concurrent requests x {args.tokens} tokens, {args.rounds} rounds, median round:",
        *(line for _, line in described.values()),
        f"engine_ratio: {ratio:.3f}",
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
        lines = run_on(model, args)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
