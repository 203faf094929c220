"""Relay benchmark: worker EventWriter -> Redis streams -> one EventHub -> many subscribers.

Starts its own redis-server. The producer (the worker side) runs in a separate process, as in
production; the hub and its subscribers run here. Figures:
  (b) added latency per event, write -> subscriber receive, 100 streams x 50 events/s
      (stepped: one engine step writes every stream's event at once; unstepped: each stream on its
      own timer, random phase);
  (c) events/s the hub relays at saturation (producer as fast as it can, consumers count bytes);
  (d) memory per idle subscribed stream (tracemalloc and RSS over 1,000 idle subscriptions);
  (e) Redis's and the hub's CPU per relayed event, 16 streams x 50 events/s (unstepped), alone and
      with 1,000 quiet streams followed beside them (responses waiting in the queue or on a tool):
      the quiet ones leave the busy read after ``quiet_after_seconds`` (the hub's two lanes).
Usage: PYTHONPATH=.:tests python bench/relay.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import random
import time
import tracemalloc
from dataclasses import dataclass
from typing import ClassVar

from _common import cpu_seconds, percentile
from openai.types.responses import ResponseTextDeltaEvent
from redis.asyncio import Redis
from support.servers import start_redis

from oss_responses.eventlog import EventHub, EventWriter, parse_frame, write_events

TTL = 600


def delta(seq: int, text: str) -> ResponseTextDeltaEvent:
    return ResponseTextDeltaEvent(
        type="response.output_text.delta", item_id="msg_0123456789abcdef0123456789abcdef",
        output_index=0, content_index=0, delta=text, logprobs=[], sequence_number=seq,
    )


@dataclass(frozen=True)
class StubDelta:
    """A pre-serialised text delta: keeps the producer cheap so the hub is what saturates."""

    # What the frame writer asks of an event's class (a pydantic model's fields): no ``response`` field.
    model_fields: ClassVar[dict[str, object]] = {}

    sequence_number: int
    type: str = "response.output_text.delta"

    def model_dump_json(self, **_options: object) -> str:
        return ('{"content_index":0,"delta":" token","item_id":"msg_0123456789abcdef0123456789abcdef",'
                f'"logprobs":[],"output_index":0,"sequence_number":{self.sequence_number},"type":"{self.type}"}}')


# --- producer process (the worker side) -------------------------------------------------------
def produce(url: str, ids: list[str], mode: str, rate: float, seconds: float, go: mp.Event) -> None:
    asyncio.run(_produce(url, ids, mode, rate, seconds, go))


async def _produce(url: str, ids: list[str], mode: str, rate: float, seconds: float, go: mp.Event) -> None:
    redis = Redis.from_url(url)
    writer = EventWriter(redis, ttl_seconds=TTL)
    while not go.is_set():
        await asyncio.sleep(0.01)
    if mode == "stepped":
        await _stepped(writer, ids, rate, seconds)
    elif mode == "unstepped":
        await asyncio.gather(*(_one_stream(writer, rid, rate, seconds) for rid in ids))
    elif mode == "backlog":
        await _backlog(writer, ids, int(rate))
    else:
        await _flood(writer, ids, seconds)
    for rid in ids:
        writer.close(rid, "completed")
    await writer.flush()
    await redis.aclose()


async def _stepped(writer: EventWriter, ids: list[str], rate: float, seconds: float) -> None:
    start = time.perf_counter()
    for step in range(int(rate * seconds)):
        for rid in ids:
            writer.append(rid, [delta(step + 1, f"{time.perf_counter():.9f}")])
        await asyncio.sleep(max(0.0, start + (step + 1) / rate - time.perf_counter()))


async def _one_stream(writer: EventWriter, rid: str, rate: float, seconds: float) -> None:
    await asyncio.sleep(random.random() / rate)
    start = time.perf_counter()
    for n in range(int(rate * seconds)):
        writer.append(rid, [delta(n + 1, f"{time.perf_counter():.9f}")])
        await asyncio.sleep(max(0.0, start + (n + 1) / rate - time.perf_counter()))


async def _flood(writer: EventWriter, ids: list[str], seconds: float) -> None:
    end = time.perf_counter() + seconds
    seq = 1
    while time.perf_counter() < end:
        for rid in ids:
            writer.append(rid, [StubDelta(seq + k) for k in range(10)])
        seq += 10
        await writer.flush()


async def _backlog(writer: EventWriter, ids: list[str], per_stream: int) -> None:
    for seq in range(1, per_stream + 1, 10):
        for rid in ids:
            writer.append(rid, [StubDelta(seq + k) for k in range(10)])
        await writer.flush()


# --- hub side ---------------------------------------------------------------------------------
async def open_streams(url: str, ids: list[str]) -> None:
    redis = Redis.from_url(url)
    async with redis.pipeline(transaction=False) as pipe:
        for rid in ids:
            pipe.delete(f"oss:events:{rid}")
        await pipe.execute()
    for rid in ids:
        await write_events(redis, rid, [delta(0, "created")])
    await redis.aclose()


async def wait_attached(hub: EventHub, count: int) -> None:
    while hub.stream_count < count:
        await asyncio.sleep(0.001)


async def gather_while_producing(tasks: list[asyncio.Task[None]], proc: mp.Process) -> None:
    """Wait for the subscribers; fail (instead of waiting forever) if the producer process died."""
    followers = asyncio.gather(*tasks)
    while not followers.done():
        await asyncio.wait({followers}, timeout=0.5)
        if proc.exitcode not in (None, 0):
            followers.cancel()
            raise RuntimeError(f"the producer process exited with {proc.exitcode}")
    followers.result()


def start_producer(url: str, ids: list[str], mode: str, rate: float, seconds: float) -> tuple[mp.Process, mp.Event]:
    go = mp.get_context("fork").Event()
    proc = mp.get_context("fork").Process(target=produce, args=(url, ids, mode, rate, seconds, go))
    proc.start()
    return proc, go


async def bench_latency(url: str, mode: str, streams: int, rate: float, seconds: float) -> tuple[float, float, int]:
    ids = [f"lat_{mode}_{n}" for n in range(streams)]
    await open_streams(url, ids)
    hub = EventHub(url)
    await hub.start()
    samples: list[float] = []
    warm_until = time.perf_counter() + 1e9

    async def follow(rid: str) -> None:
        async for data in hub.subscribe(rid, after=0):
            now = time.perf_counter()
            if now > warm_until:
                samples.append(now - float(parse_frame(data)["delta"]))

    tasks = [asyncio.create_task(follow(rid)) for rid in ids]
    await wait_attached(hub, streams)
    proc, go = start_producer(url, ids, mode, rate, seconds)
    warm_until = time.perf_counter() + 0.5
    go.set()
    await gather_while_producing(tasks, proc)
    proc.join()
    await hub.stop()
    return percentile(samples, 0.5) * 1e3, percentile(samples, 0.99) * 1e3, len(samples)


async def bench_throughput(url: str, streams: int, seconds: float) -> tuple[float, float]:
    ids = [f"tp_{n}" for n in range(streams)]
    await open_streams(url, ids)
    hub = EventHub(url)
    await hub.start()
    counts = {"events": 0, "bytes": 0}

    async def follow(rid: str) -> None:
        events = size = 0
        async for data in hub.subscribe(rid, after=0):
            events += 1
            size += len(data)
            counts["events"] += 1
        counts["bytes"] += size

    tasks = [asyncio.create_task(follow(rid)) for rid in ids]
    await wait_attached(hub, streams)
    proc, go = start_producer(url, ids, "flood", 0.0, seconds)
    go.set()
    await asyncio.sleep(1.0)  # warm-up
    n0, t0, c0 = counts["events"], time.perf_counter(), cpu_seconds(os.getpid())
    await asyncio.sleep(seconds - 1.5)
    n1, t1, c1 = counts["events"], time.perf_counter(), cpu_seconds(os.getpid())
    await gather_while_producing(tasks, proc)
    proc.join()
    await hub.stop()
    rate = (n1 - n0) / (t1 - t0)
    cpu_per_event_us = (c1 - c0) / max(1, n1 - n0) * 1e6
    return rate, cpu_per_event_us


async def bench_backlog(url: str, streams: int, per_stream: int) -> tuple[float, float]:
    """The hub's own ceiling: its loop is held while a backlog is written, then it relays it alone."""
    ids = [f"bl_{n}" for n in range(streams)]
    await open_streams(url, ids)
    hub = EventHub(url)
    await hub.start()
    received = 0

    async def follow(rid: str) -> None:
        nonlocal received
        size = 0
        async for data in hub.subscribe(rid, after=0):
            size += len(data)
            received += 1

    tasks = [asyncio.create_task(follow(rid)) for rid in ids]
    await wait_attached(hub, streams)
    proc, go = start_producer(url, ids, "backlog", per_stream, 0.0)
    go.set()
    proc.join()  # blocks this loop: the backlog piles up in Redis
    if proc.exitcode != 0:
        raise RuntimeError(f"the producer process exited with {proc.exitcode}")
    t0, c0 = time.perf_counter(), cpu_seconds(os.getpid())
    await asyncio.gather(*tasks)
    t1, c1 = time.perf_counter(), cpu_seconds(os.getpid())
    await hub.stop()
    return received / (t1 - t0), (c1 - c0) / received * 1e6


async def bench_quiet_streams(url: str, redis_pid: int, quiet: int, busy: int, rate: float,
                              seconds: float) -> tuple[float, float, int]:
    """Redis's and the hub's CPU per event relayed on ``busy`` streams while ``quiet`` more are
    followed and get nothing, measured once the quiet ones had time to leave the busy read."""
    hub = EventHub(url)
    busy_ids = [f"busy_{quiet}_{n}" for n in range(busy)]
    quiet_ids = [f"quiet_{quiet}_{n}" for n in range(quiet)]
    await open_streams(url, busy_ids + quiet_ids)
    await hub.start()
    relayed = [0]

    async def follow(rid: str) -> None:
        async for _ in hub.subscribe(rid, after=0):
            relayed[0] += 1

    busy_tasks = [asyncio.create_task(follow(rid)) for rid in busy_ids]
    quiet_tasks = [asyncio.create_task(follow(rid)) for rid in quiet_ids]
    await wait_attached(hub, busy + quiet)
    settle = 3.0  # the hub's quiet_after_seconds (2 s) and a busy read after it
    proc, go = start_producer(url, busy_ids, "unstepped", rate, seconds + settle + 1.0)
    go.set()
    await asyncio.sleep(settle)
    n0, r0, h0 = relayed[0], cpu_seconds(redis_pid), cpu_seconds(os.getpid())
    await asyncio.sleep(seconds)
    n1, r1, h1 = relayed[0], cpu_seconds(redis_pid), cpu_seconds(os.getpid())
    in_quiet_read = hub.quiet_count
    await gather_while_producing(busy_tasks, proc)
    proc.join()
    for task in quiet_tasks:
        task.cancel()
    await asyncio.gather(*quiet_tasks, return_exceptions=True)
    await hub.stop()
    events = max(1, n1 - n0)
    return (r1 - r0) / events * 1e6, (h1 - h0) / events * 1e6, in_quiet_read


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def bench_memory(url: str, streams: int) -> tuple[float, float]:
    ids = [f"idle_{n}" for n in range(streams)]
    await open_streams(url, ids)
    hub = EventHub(url)
    await hub.start()
    rss0 = rss_bytes()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    iterators = [hub.subscribe(rid, after=0) for rid in ids]
    tasks = [asyncio.create_task(_drain(it)) for it in iterators]
    await wait_attached(hub, streams)
    await asyncio.sleep(0.2)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    rss1 = rss_bytes()
    traced = sum(s.size_diff for s in after.compare_to(before, "filename"))
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await hub.stop()
    return traced / streams / 1024, (rss1 - rss0) / streams / 1024


async def _drain(frames) -> None:
    async for _ in frames:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--latency-streams", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50.0, help="events/s per stream for (b)")
    parser.add_argument("--throughput-streams", type=int, default=200)
    parser.add_argument("--idle-streams", type=int, default=1000)
    args = parser.parse_args()
    server = start_redis()
    try:
        for mode in ("stepped", "unstepped"):
            p50, p99, n = asyncio.run(bench_latency(server.url, mode, args.latency_streams, args.rate, args.seconds))
            print(f"(b) latency write->receive, {args.latency_streams} streams x {args.rate:g} ev/s, {mode}: "
                  f"p50 {p50:.2f} ms, p99 {p99:.2f} ms ({n} events; target p50<=5, p99<=25)")
        per_traced, per_rss = asyncio.run(bench_memory(server.url, args.idle_streams))
        print(f"(d) memory per idle subscribed stream ({args.idle_streams} streams): tracemalloc {per_traced:.1f} KB, "
              f"RSS {per_rss:.1f} KB (target <=50 KB)")
        for quiet in (0, args.idle_streams):
            redis_us, hub_us, in_quiet_read = asyncio.run(
                bench_quiet_streams(server.url, server.process.pid, quiet, 16, args.rate, args.seconds))
            print(f"(e) 16 streams x {args.rate:g} ev/s with {quiet} quiet streams followed beside them "
                  f"({in_quiet_read} in the quiet read): Redis {redis_us:.1f} us, hub {hub_us:.1f} us of CPU "
                  f"per relayed event")
        flood, flood_cpu = asyncio.run(bench_throughput(server.url, args.throughput_streams, args.seconds))
        print(f"(c) relay while a producer process floods {args.throughput_streams} streams (same 2 cores): "
              f"{flood:,.0f} events/s, {flood_cpu:.1f} us hub-process CPU per event")
        rate, cpu_us = asyncio.run(bench_backlog(server.url, args.throughput_streams, 1000))
        print(f"(c) hub relay at saturation (backlog of {args.throughput_streams} x 1000 events, hub alone): "
              f"{rate:,.0f} events/s, {cpu_us:.1f} us CPU per event (target >=20,000 events/s)")
        print(f"relay_events_per_second: {rate:.0f} events/s")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
