"""A test process's environment kept as the tests found it.

Libraries the tests drive set variables in their own process's environment for their own use: vLLM's
engine, starting, sets those of the processes it spawns (``LD_PRELOAD``, ``VLLM_*``,
``LOCAL_WORLD_SIZE``, ...); LiteLLM, at first use, points ``TIKTOKEN_CACHE_DIR`` at its own files. Left
there, every service process a later test in that process starts inherits them, and none can be forked
(:func:`support.forked.can_fork` compares environments): in one full run 39 starts were executed afresh
for it, 2.4-3.3 s of CPU each to ready instead of 0.5-1.2 (README, "The two commands").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def environment_restored() -> Iterator[None]:
    """This process's environment, after the block, as it was before it."""
    before = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)
