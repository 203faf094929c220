"""A long-running process's start-up heap, kept out of the garbage collector's full passes.

CPython's full (generation 2) collection walks every object the collector tracks, and the process
stands still meanwhile. After start-up the API process holds ~260k of them (FastAPI, pydantic's
models of the openai types, SQLAlchemy, Celery); one full pass took 170 ms, and every request and
SSE stream of the process waited for it (bench/service.py (e): one round in ~30 of 8 concurrent
accepts answered after 170-190 ms instead of ~30). A worker holds vLLM and torch besides, and its
engine loop (every running response's tokens) would stall alike.

What start-up allocated lives as long as the process, so it is moved to the permanent generation
(``gc.freeze``) once the process is ready: later full passes walk only what requests allocated.
Reference counting still frees frozen objects; only a reference cycle among them would stay.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)


def freeze_startup_heap(process: str) -> int:
    """Collect start-up's garbage, then freeze what is left; how many objects were frozen."""
    started = time.perf_counter()
    gc.collect()  # garbage of the start-up goes now, rather than being frozen for good
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("%s: %d start-up objects kept out of garbage collection (%.0f ms)",
             process, frozen, (time.perf_counter() - started) * 1000)
    return frozen
