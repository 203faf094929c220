"""What the service burns doing nothing: each process's CPU per second with no request in flight.

Idle CPU is paid every second whatever the load, so where a machine generates slowly (CPU here, or a
small model) it weighs on the CPU per token that bench/engine.py reports: at ~100 tokens/s, 10 ms/s
of idle work is ~100 us per token. Starts the bench stack (bench/_service/stack.py: redis-server,
SQLite, one API process, one Celery worker with the scripted engine), waits until the start-up work
has settled, then reads each process's CPU (``/proc``, 10 ms ticks) over ``--seconds``, three windows.

    PYTHONPATH=.:tests python bench/idle.py [--seconds 20] [--windows 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import CpuMeter
from _service.stack import start_stack
from service import stack_processes

SETTLE_SECONDS = 5.0  # the worker's start-up (readiness, first reaper pass, Celery's mingle) is over


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of one measured window")
    parser.add_argument("--windows", type=int, default=3)
    args = parser.parse_args()
    stack = start_stack()
    try:
        stack.start_worker(8, traced=False)
        time.sleep(SETTLE_SECONDS)
        meter = CpuMeter(lambda: stack_processes(stack))
        totals = []
        for window in range(args.windows):
            meter.begin()
            time.sleep(args.seconds)
            used = meter.end()
            service = {name: seconds for name, seconds in used.items() if name != "client"}
            totals.append(sum(service.values()) / meter.wall * 1e3)
            print(f"window {window + 1}: " + ", ".join(
                f"{name} {seconds / meter.wall * 1e3:.1f}" for name, seconds in service.items()
            ) + " ms of CPU per second")
    finally:
        stack.stop()
    print(f"idle service CPU (api + redis + worker), median of {args.windows} windows of {args.seconds:.0f} s: "
          f"{statistics.median(totals):.1f} ms/s")


if __name__ == "__main__":
    main()
