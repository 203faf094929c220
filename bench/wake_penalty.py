"""What this machine charges for memory left untouched for a while: the same work, hot and after a gap.

On the development machine (a KVM guest under nested virtualisation: ``nested_pvm=1`` on its kernel
command line), touching a page again costs more the longer it was left alone: tens of times more
after a second, and the guest sees no page fault for it (``ru_minflt`` does not move), so the cost
is the hypervisor's. On bare metal it should cost a cache and TLB miss at most, whatever its age
(expected, not measured). Every process that waits between engine steps pays it for the pages its
step touches again; a service whose tokens cross three processes (worker, Redis, API) likely pays
more of it than vLLM's own server, one process. ``engine.py`` and ``service.py`` print the day's
penalty; this script shows it in detail, so that a run can be read against it.

Two kinds of work, each repeated after sleeps of increasing length (``--gaps``, ms):
1. a write to every page of a 64 MB buffer (ns per page);
2. one engine step's protocol work for 8 streams: 8 ``response.output_text.delta`` events built with
   openai's own type and serialised (µs per step).
The ratio to the hot run (no gap) is the penalty. The last line is the headline: the page penalty
after a 20 ms gap (bench/service.py's phase b paces its steps at 20 ms), ``wake_penalty_20ms: X x``.

    PYTHONPATH=.:tests python bench/wake_penalty.py [--gaps 8,20,100,1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable

from openai.types.responses import ResponseTextDeltaEvent

PAGE = 4096
BUFFER_BYTES = 64 * 1024 * 1024
STREAMS = 8
HEADLINE_GAP_MS = 20.0

AfterGaps = dict[float, tuple[float, int]]  # gap (ms) -> (median after it, guest page faults)


def touch_pages(buffer: bytearray) -> float:
    """Write one byte in every page of ``buffer``; ns per page."""
    started = time.perf_counter()
    for offset in range(0, len(buffer), PAGE):
        buffer[offset] = (buffer[offset] + 1) & 0xFF
    return (time.perf_counter() - started) / (len(buffer) // PAGE) * 1e9


def step_events() -> float:
    """One engine step's events for ``STREAMS`` streams, built and serialised; µs."""
    started = time.perf_counter()
    for stream in range(STREAMS):
        event = ResponseTextDeltaEvent(
            type="response.output_text.delta", item_id=f"msg_{stream:032x}", output_index=1, content_index=0,
            delta=" word", sequence_number=100 + stream, logprobs=[],
        )
        event.model_dump_json()
    return (time.perf_counter() - started) * 1e6


def after_gap(work: Callable[[], float], gap_ms: float, repeats: int) -> tuple[float, int]:
    """The median of ``repeats`` runs of ``work``, each after a sleep of ``gap_ms``; and the guest's
    minor page faults during the runs (0: the cost is not the guest kernel's)."""
    samples, faults = [], 0
    for _ in range(repeats):
        time.sleep(gap_ms / 1000)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        samples.append(work())
        faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    return statistics.median(samples), faults


def hot(work: Callable[[], float], repeats: int) -> float:
    """The median of ``repeats`` runs back to back, after two to warm up."""
    for _ in range(2):
        work()
    return statistics.median(work() for _ in range(repeats))


def measure(work: Callable[[], float], gaps_ms: list[float], repeats: int) -> tuple[float, AfterGaps]:
    """``work``'s hot median, and per gap its median after that gap with the guest's page faults."""
    base = hot(work, repeats)
    return base, {gap: after_gap(work, gap, repeats) for gap in gaps_ms}


def page_work() -> Callable[[], float]:
    buffer = bytearray(BUFFER_BYTES)
    return lambda: touch_pages(buffer)


def penalty_line(repeats: int = 3) -> str:
    """One line for another bench's report (engine.py, service.py): the machine's state in that run."""
    base, after = measure(page_work(), [HEADLINE_GAP_MS, 1000.0], repeats)
    return (f"machine wake penalty (bench/wake_penalty.py; a page written again after a sleep, x hot): "
            f"after 20 ms {after[HEADLINE_GAP_MS][0] / base:.1f}x, after 1 s {after[1000.0][0] / base:.1f}x")


def report(name: str, unit: str, base: float, after: AfterGaps) -> None:
    print(f"{name}: hot {base:8.1f} {unit}")
    for gap, (value, faults) in after.items():
        print(f"    after {gap:6.0f} ms asleep {value:8.1f} {unit}  {value / base:6.1f}x hot  "
              f"(guest page faults: {faults})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gaps", default="8,20,100,1000", help="comma-separated sleeps before each run, in ms")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    gaps = [float(gap) for gap in args.gaps.split(",")]
    if HEADLINE_GAP_MS not in gaps:
        gaps.append(HEADLINE_GAP_MS)
    base, after = measure(page_work(), gaps, args.repeats)
    report("page write (64 MB buffer)", "ns/page", base, after)
    report(f"{STREAMS} delta events built + serialised", "us/step", *measure(step_events, gaps, args.repeats))
    print(f"wake_penalty_20ms: {after[HEADLINE_GAP_MS][0] / base:.1f} x")


if __name__ == "__main__":
    main()
