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
        [--stream-interval 1] [--profile] [--default-gc]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import redis as redis_lib
from _ceiling.synthetic_llm import StepSample, SyntheticLLM
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
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--default-gc", action="store_true", help="keep CPython's own garbage collection settings")
    args = parser.parse_args()
    encoding = load_encoding()
    server = start_redis()
    redis = redis_lib.Redis.from_url(server.url)
    try:
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{folder}/bench.db"
            migrate(url)
            db = Database(url)
            settings = worker_settings(url, server.url, engine="vllm", lease_seconds=30.0,
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
                if profiler:
                    worker.loop.run(_enable(profiler))
                with ThreadPoolExecutor(args.streams) as pool:
                    outcomes = list(pool.map(lambda rid: run_response_now(rid, worker=worker), ids))
                if profiler:
                    worker.loop.run(_disable(profiler))
            db.dispose()
        assert set(outcomes) == {"completed"}, outcomes
        first, last = full_window(llm.samples, args.streams)
        wall, cpu, tokens = last.at - first.at, last.cpu - first.cpu, last.tokens - first.tokens
        rate = tokens / wall
        steps = sum(1 for sample in llm.samples if first.at < sample.at <= last.at)
        print(f"{args.streams} streams of 'tokens {args.tokens}' ({llm.tokens:,} tokens in all); window of "
              f"{wall:.2f} s with all {args.streams} running: {tokens:,} tokens, {rate:,.0f} tokens/s, "
              f"a step every {wall / steps * 1e3:.2f} ms, loop thread CPU {cpu / wall:.0%}")
        if profiler:
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        print(f"worker_ceiling: {rate:,.0f} tokens/s (target {TARGET_TOKENS_PER_SECOND:,}), "
              f"{cpu / tokens * 1e6:.1f} µs loop-thread CPU per token")
    finally:
        redis.close()
        server.stop()


if __name__ == "__main__":
    main()
