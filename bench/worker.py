"""The worker's per-token path in one process: scripted engine → Generation → translator → EventWriter.

No Celery, no SQL, no API: ``--streams`` responses of ``tokens N`` generate at full speed on one
event loop (as on the worker's engine loop), their events written to a real redis-server (started
here on a free port). Prints events/s and tokens/s over a window after warm-up and the loop thread's
CPU per token; the headline is the last line. ``--profile`` prints cProfile's top functions.

    PYTHONPATH=.:tests python bench/worker.py [--streams 200] [--seconds 4] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time
from functools import partial

from openai.types.responses import Response
from redis.asyncio import Redis
from support.servers import start_redis

from oss_responses.engine.base import SamplingSettings
from oss_responses.engine.scripted import ScriptedEngine
from oss_responses.eventlog.writer import EventWriter
from oss_responses.harmony.render import render_prompt  # noqa: F401 (its import cost stays outside the window)
from oss_responses.vocab import load_encoding
from oss_responses.workers.generation import Generation
from oss_responses.workers.journal import JournaledTranslator


def _response(n: int) -> Response:
    return Response.model_validate({
        "id": f"resp_bench{n:06d}", "object": "response", "created_at": time.time(), "model": "gpt-oss-20b",
        "output": [], "tool_choice": "auto", "tools": [], "parallel_tool_calls": True, "status": "queued",
    })


def _prompt(encoding, tokens: int) -> list[int]:
    text = f"<|start|>user<|message|>tokens {tokens}<|end|><|start|>assistant"
    return encoding.encode(text, allowed_special="all")


class Counter:
    """Counts events and generated tokens written (wraps ``append``/``append_journal`` of one writer)."""

    def __init__(self, writer: EventWriter) -> None:
        self.events = 0
        self.tokens = 0
        append, journal = writer.append, writer.append_journal

        def counted(response_id, events):  # type: ignore[no-untyped-def]
            events = events if isinstance(events, list) else list(events)
            self.events += len(events)
            append(response_id, events)

        def counted_journal(response_id, step):  # type: ignore[no-untyped-def]
            if step[0] == "feed":
                self.tokens += len(step[1])
            journal(response_id, step)

        writer.append = counted  # type: ignore[method-assign]
        writer.append_journal = counted_journal  # type: ignore[method-assign]


async def run(streams: int, seconds: float, tokens: int, profile: bool) -> None:
    encoding = load_encoding()
    server = start_redis()
    redis = Redis.from_url(server.url)
    try:
        writer = EventWriter(redis, ttl_seconds=3600)
        counter = Counter(writer)
        engine = ScriptedEngine(encoding)
        prompt = _prompt(encoding, tokens)
        stops = tuple(encoding.stop_tokens_for_assistant_actions())
        gens = []
        for n in range(streams):
            response_id = f"resp_bench{n:06d}"
            # As the runner makes it: journaled (every call recorded ahead of its events), ids seeded.
            translator = JournaledTranslator(_response(n), encoding=encoding, first_sequence_number=2,
                                             id_seed=response_id)
            translator.record = partial(writer.append_journal, response_id)
            gens.append(Generation(response_id, engine, writer, translator, None,  # type: ignore[arg-type]
                                   SamplingSettings(max_tokens=tokens + 100, stop_token_ids=stops),
                                   journal=translator.record))
        tasks = [asyncio.ensure_future(g.run(prompt)) for g in gens]
        await asyncio.sleep(1.0)
        e0, k0, c0, t0 = counter.events, counter.tokens, time.thread_time(), time.monotonic()
        profiler = cProfile.Profile() if profile else None
        if profiler:
            profiler.enable()
        await asyncio.sleep(seconds)
        if profiler:
            profiler.disable()
        e1, k1, c1, t1 = counter.events, counter.tokens, time.thread_time(), time.monotonic()
        for g in gens:
            g.stop("cancelled")
        await asyncio.gather(*tasks, return_exceptions=True)
        await writer.flush()
        wall, cpu, events, toks = t1 - t0, c1 - c0, e1 - e0, k1 - k0
        print(f"{streams} streams of 'tokens {tokens}', {wall:.1f} s window: {events / wall:,.0f} events/s, "
              f"{toks / wall:,.0f} tokens/s; loop thread CPU {cpu / wall:.0%}, {cpu / max(1, toks) * 1e6:.1f} µs/token")
        if profiler:
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        print(f"worker_events_per_second: {events / wall:.0f} events/s")
    finally:
        await redis.aclose()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    asyncio.run(run(args.streams, args.seconds, args.tokens, args.profile))


if __name__ == "__main__":
    main()
