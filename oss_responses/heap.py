"""Garbage collection in a long-running process: the start-up heap frozen, the young generation larger.

CPython's full (generation 2) collection walks every object the collector tracks, and the process
stands still meanwhile. After start-up the API process holds ~250k of them (FastAPI, pydantic's
models of the openai types, SQLAlchemy, Celery); one full pass took 170 ms, and every request and
SSE stream of the process waited for it (bench/service.py (e): one round in ~30 of 8 concurrent
accepts answered after 170-190 ms instead of ~30). A worker holds vLLM and torch besides, and its
engine loop (every running response's tokens) would stall alike. What start-up allocated lives as
long as the process, so it is moved to the permanent generation (``gc.freeze``) once the process is
ready: later full passes walk only what requests allocated. Reference counting still frees frozen
objects; only a reference cycle among them would stay.

The hot paths allocate a few objects per token (events, frames) that reference counting frees, yet
every 700 allocations CPython runs a young-generation pass over them. Passes every 50,000 instead:
the worker's loop thread spent 15.1 µs per token instead of 18.1 (bench/worker_ceiling.py, four runs
each, 128 streams); a pass then takes about a millisecond.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)

THRESHOLDS = (50_000, 20, 100)  # CPython's defaults: (700, 10, 10)


def tune_garbage_collection(process: str) -> int:
    """Collect start-up's garbage, freeze what is left, raise the thresholds; how many objects were frozen."""
    started = time.perf_counter()
    gc.collect()  # garbage of the start-up goes now, rather than being frozen for good
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    frozen = gc.get_freeze_count()
    log.info("%s: %d start-up objects kept out of garbage collection (%.0f ms); thresholds %s",
             process, frozen, (time.perf_counter() - started) * 1000, THRESHOLDS)
    return frozen
