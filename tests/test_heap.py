"""A process's start-up heap is kept out of the garbage collector's full passes."""

from __future__ import annotations

import gc
import subprocess
import sys

from oss_responses.heap import THRESHOLDS, tune_garbage_collection


def test_tune_garbage_collection_freezes_start_up_heap_and_raises_thresholds() -> None:
    thresholds = gc.get_threshold()
    try:
        frozen = tune_garbage_collection("test")
        # Frozen objects may still be freed (reference counting; other threads of this test process
        # run on): the permanent generation can only shrink until something freezes again.
        assert 0 < gc.get_freeze_count() <= frozen
        assert gc.get_threshold() == THRESHOLDS
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_full_collection_skips_frozen_heap() -> None:
    # In a fresh interpreter: a heap of 300k tracked objects, collected in full before and after freezing.
    script = """
import gc, time
from oss_responses.heap import tune_garbage_collection
heap = [[i] for i in range(300_000)]
def full_pass():
    started = time.perf_counter(); gc.collect(); return time.perf_counter() - started
before = min(full_pass() for _ in range(3))
tune_garbage_collection("test")
after = min(full_pass() for _ in range(3))
print(before, after)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    before, after = map(float, out.split())
    assert after < before / 5
