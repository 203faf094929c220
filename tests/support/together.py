"""Calls made by several processes at one moment (a spawned child's target must live in an importable module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oss_responses.vocab import ensure_vocabulary


def ensure_vocabulary_together(folder: str, start: Any, results: Any) -> None:
    """``ensure_vocabulary(folder)`` once every process of ``start`` (a barrier) is ready; "ok" or its error."""
    start.wait()
    try:
        ensure_vocabulary(Path(folder))
    except Exception as exc:  # reported, not raised: the test reads every child's outcome
        results.put(f"{type(exc).__name__}: {exc}")
    else:
        results.put("ok")
