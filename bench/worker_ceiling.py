"""A worker's ceiling: the real worker path fed by a synthetic GPU, 128 streams, one token per step.

One in-process worker (engine loop thread, runner, lease and cancel machinery, journal, translator,
``EventWriter`` to a real redis-server started here, SQLite), whose engine is the real ``VllmEngine``
adapter over :class:`bench._ceiling.synthetic_llm.SyntheticLLM`: vLLM's own ``RequestOutput`` objects,
DELTA token ids, every running request one token per step, each step as soon as the worker took the
last one. ``--streams`` responses of ``tokens N`` run concurrently (one task thread each, as Celery's
threads pool runs them). Measured over the steps when all of them run: tokens/s and the loop
thread's CPU per token (the loop thread is the one that would feed the GPU). The headline is the
last line. ``--step-ms`` paces the steps as a GPU's forward passes do (an H100 runs gpt-oss-20b at
~19,000 tokens/s over 128 streams: a step every ~6.7 ms); then the loop thread's share of the wall
clock is the headroom left, and every step pays the loop's fixed costs (a wake, a flush) for its
tokens. ``--profile`` prints cProfile's top functions of the loop thread over that run, timed by
the thread's CPU clock (which makes the run about ten times slower: compare entries, not rates).

The worker's garbage collection is tuned as a worker process's start-up tunes it (oss_responses/heap.py);
``--default-gc`` keeps CPython's defaults, for comparison.

    PYTHONPATH=.:tests python bench/worker_ceiling.py [--streams 128] [--tokens 1500] [--step-ms 6.7]
        [--stream-interval 1] [--processes 1] [--reader] [--profile] [--default-gc]

``--processes N`` runs N such worker processes at once over one redis-server, the streams shared among
them, as ``OSS_RESPONSES_VLLM_FRONTENDS=N`` runs N workers over one engine core (each here with its own
synthetic engine: the core's work is the GPU's, not counted). They start their streams together; the
headline is the tokens/s of all of them over the time when every stream ran.

The redis-server's CPU over the same window is printed per token: the share of one Redis core a GPU's
tokens take. ``--reader`` adds what an API process does with them: a process whose ``EventHub`` follows
every stream (``bench/_ceiling/reader.py``; the frames read, not written to sockets), its CPU per token
printed too, and Redis's then counts the reads as well as the writes.
"""

from __future__ import annotations

import argparse
import bisect
import cProfile
import dataclasses
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import redis as redis_lib
from _ceiling.synthetic_llm import StepSample, SyntheticLLM
from _common import CpuTimeline
from support.servers import start_redis
from support.workers import accept, worker_settings

from oss_responses.engine.vllm import ScriptedAnswers, VllmEngine
from oss_responses.heap import tune_garbage_collection
from oss_responses.schemas import build_protocol_schemas
from oss_responses.storage import Database, migrate
from oss_responses.vocab import load_encoding
from oss_responses.workers.testing import local_worker, run_response_now

TARGET_TOKENS_PER_SECOND = 20_000


def full_window(samples: list[StepSample], streams: int) -> tuple[StepSample, StepSample]:
    """The first and last step at which every stream was running."""
    full = [s for s in samples if s.running == streams]
    if len(full) < 2:
        raise RuntimeError(f"never {streams} streams at once: raise --tokens")
    return full[0], full[-1]


async def _enable(profiler: cProfile.Profile) -> None:
    profiler.enable()  # cProfile profiles the thread that enables it: here, the loop thread


async def _disable(profiler: cProfile.Profile) -> None:
    profiler.disable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=1500)
    parser.add_argument("--step-ms", type=float, default=0.0,
                        help="a step at most every this many ms, as a GPU paces them (default: as fast as taken)")
    parser.add_argument("--stream-interval", type=int, default=1,
                        help="tokens per output after a request's first (OSS_RESPONSES_STREAM_INTERVAL)")
    parser.add_argument("--processes", type=int, default=1,
                        help="worker processes sharing the streams (OSS_RESPONSES_VLLM_FRONTENDS), one Redis")
    parser.add_argument("--reader", action="store_true",
                        help="an API-like process follows every stream through its EventHub (one process only)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--default-gc", action="store_true", help="keep CPython's own garbage collection settings")
    # A child of --processes: the shared Redis, and the file whose existence starts every child at once.
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    parser.add_argument("--go", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reader and args.processes > 1:
        parser.error("--reader follows the streams of one worker process: leave --processes at 1")
    if args.processes > 1:
        run_processes(args)
        return
    if args.go:  # a child of --processes: the parent starts Redis, reads its CPU and sums the windows
        print(json.dumps(dataclasses.asdict(run_worker(args, args.redis_url, None))))
        return
    server = start_redis()
    try:
        with CpuTimeline({"redis": server.process.pid}) as timeline:
            window = run_worker(args, server.url, timeline)
        commands = redis_command_times(server.url)
    finally:
        server.stop()
    print(window.summary())
    print(shares_line(timeline.between(window.start, window.end), window.tokens))
    print(commands)
    print(f"worker_ceiling: {window.rate:,.0f} tokens/s (target {TARGET_TOKENS_PER_SECOND:,}), "
          f"{window.cpu / window.tokens * 1e6:.1f} µs loop-thread CPU per token")


def shares_line(cpu: dict[str, float], tokens: int) -> str:
    """Redis's (and the reader's) CPU per token over the window, and the tokens/s one core of each takes."""
    parts = [f"{name} {seconds / tokens * 1e6:.1f} µs CPU per token (one core: {tokens / seconds:,.0f} tokens/s)"
             for name, seconds in cpu.items() if seconds > 0]
    return "over the window: " + "; ".join(parts)


@dataclass
class Window:
    """One worker process's steps while all its streams ran."""

    streams: int
    total_tokens: int  # over the whole run
    start: float  # monotonic seconds (one clock for every process of the machine)
    end: float
    tokens: int
    cpu: float  # the loop thread's
    samples: list[tuple[float, int]]  # (monotonic seconds, tokens so far), every step of the window

    @property
    def rate(self) -> float:
        return self.tokens / (self.end - self.start)

    def summary(self) -> str:
        wall = self.end - self.start
        return (f"{self.streams} streams ({self.total_tokens:,} tokens in all); window of {wall:.2f} s with all "
                f"{self.streams} running: {self.tokens:,} tokens, {self.rate:,.0f} tokens/s, a step every "
                f"{wall / (len(self.samples) - 1) * 1e3:.2f} ms, loop thread CPU {self.cpu / wall:.0%}")

    def tokens_at(self, moment: float) -> int:
        """Tokens produced by ``moment`` (the last step at or before it)."""
        return int(self.samples[max(0, bisect.bisect_right(self.samples, moment, key=lambda s: s[0]) - 1)][1])


def redis_command_times(redis_url: str, top: int = 4) -> str:
    """Where Redis's command time went over the whole run (``INFO commandstats``; a script's own commands
    are counted both in it and on their own)."""
    client = redis_lib.Redis.from_url(redis_url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    ranked = sorted(stats.items(), key=lambda item: -item[1]["usec"])[:top]
    return "redis's command time over the run: " + ", ".join(
        f"{name.removeprefix('cmdstat_')} {stat['usec'] / 1e6:.2f} s ({stat['calls']:,} calls, "
        f"{stat['usec_per_call']:.0f} µs each)" for name, stat in ranked)


def run_worker(args: argparse.Namespace, redis_url: str, timeline: CpuTimeline | None) -> Window:
    """One worker process's run; its figures over the steps when all its streams ran. With
    ``--reader``, the reader process's CPU joins ``timeline``."""
    encoding = load_encoding()
    redis = redis_lib.Redis.from_url(redis_url)
    try:
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{folder}/bench.db"
            migrate(url)
            db = Database(url)
            settings = worker_settings(url, redis_url, engine="vllm", lease_seconds=30.0,
                                       worker_concurrency=args.streams, default_max_output_tokens=args.tokens * 4,
                                       stream_interval=args.stream_interval)
            engine = VllmEngine(settings, encoding)
            llm = SyntheticLLM(ScriptedAnswers(encoding), step_seconds=args.step_ms / 1000)
            engine._llm = llm  # type: ignore[assignment]  # start() then keeps it: no vLLM engine core
            # Timed by the loop thread's CPU clock: wall time would charge GIL waits to whatever was running.
            profiler = cProfile.Profile(time.thread_time) if args.profile else None
            build_protocol_schemas("worker")  # as a worker process's start-up step does, before it takes work
            with local_worker(settings, engine=engine, with_mcp=False) as worker:
                if not args.default_gc:  # as a worker process's start-up step does
                    tune_garbage_collection("worker")
                ids = [accept(db, redis, settings, input=f"tokens {args.tokens}", background=True)
                       for _ in range(args.streams)]
                with reading(redis_url, ids, Path(folder), timeline) if args.reader else nullcontext() as reader:
                    if args.go:
                        _wait_for_go(Path(args.go))
                    if profiler:
                        worker.loop.run(_enable(profiler))
                    with ThreadPoolExecutor(args.streams) as pool:
                        outcomes = list(pool.map(lambda rid: run_response_now(rid, worker=worker), ids))
                    if profiler:
                        worker.loop.run(_disable(profiler))
                    if reader is not None:
                        print(f"the reader followed {reader.communicate(timeout=60)[0].split()[0]} events")
            db.dispose()
    finally:
        redis.close()
    assert set(outcomes) == {"completed"}, outcomes
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    first, last = full_window(llm.samples, args.streams)
    inside = [s for s in llm.samples if first.at <= s.at <= last.at]
    return Window(streams=args.streams, total_tokens=llm.tokens, start=first.at, end=last.at,
                  tokens=last.tokens - first.tokens, cpu=last.cpu - first.cpu,
                  samples=[(s.at, s.tokens) for s in inside])


@contextmanager
def reading(
    redis_url: str, ids: list[str], folder: Path, timeline: CpuTimeline | None
) -> Iterator[subprocess.Popen[str]]:
    """The API-like reader process, following every stream from its start (entered once it follows
    them all); killed on the way out if it still runs."""
    (folder / "ids").write_text("\n".join(ids))
    ready = folder / "reader.ready"
    reader = subprocess.Popen([sys.executable, str(Path(__file__).parent / "_ceiling" / "reader.py"), redis_url,
                               str(folder / "ids"), str(ready)], stdout=subprocess.PIPE, text=True)
    try:
        while not ready.exists():
            if reader.poll() is not None:
                raise RuntimeError("the reader exited before it followed the streams")
            time.sleep(0.02)
        if timeline is not None:
            timeline.add("reader", reader.pid)
        yield reader
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()


def _wait_for_go(go: Path) -> None:
    go.with_name(f"{go.name}.ready.{os.getpid()}").touch()
    while not go.exists():
        time.sleep(0.01)


def run_processes(args: argparse.Namespace) -> None:
    """``--processes N``: N worker processes over one Redis, ``--streams`` shared among them, started
    together; tokens/s summed over the time when every stream of every process ran."""
    count = args.processes
    server = start_redis()
    try:
        with tempfile.TemporaryDirectory() as folder, CpuTimeline({"redis": server.process.pid}) as timeline:
            go = Path(folder) / "go"
            command = [sys.executable, __file__, "--streams", str(args.streams // count), "--tokens", str(args.tokens),
                       "--step-ms", str(args.step_ms), "--stream-interval", str(args.stream_interval),
                       "--redis-url", server.url, "--go", str(go)] + (["--default-gc"] if args.default_gc else [])
            children = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(count)]
            while len(list(Path(folder).glob("go.ready.*"))) < count:
                if any(child.poll() is not None for child in children):
                    raise RuntimeError("a worker process exited before it was ready")
                time.sleep(0.05)
            go.touch()
            outputs = [child.communicate()[0] for child in children]
    finally:
        server.stop()
    windows = [Window(**json.loads(output.strip().splitlines()[-1])) for output in outputs]
    start, end = max(w.start for w in windows), min(w.end for w in windows)
    if end <= start:
        raise RuntimeError("the processes' full windows do not overlap: raise --tokens")
    tokens = sum(w.tokens_at(end) - w.tokens_at(start) for w in windows)
    cpu_per_token = sum(w.cpu for w in windows) / sum(w.tokens for w in windows)
    for index, window in enumerate(windows):
        print(f"process {index}: {window.summary()}, {window.cpu / window.tokens * 1e6:.1f} µs per token")
    print(f"{count} processes, {args.streams} streams in all: {end - start:.2f} s with every stream running, "
          f"{tokens:,} tokens")
    print(shares_line(timeline.between(start, end), tokens))
    print(f"worker_ceiling: {tokens / (end - start):,.0f} tokens/s over {count} processes "
          f"(target {TARGET_TOKENS_PER_SECOND:,}), {cpu_per_token * 1e6:.1f} µs loop-thread CPU per token")


if __name__ == "__main__":
    main()
