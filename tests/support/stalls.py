"""How long an API keeps another client waiting while it serves a costly request."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx2


def waits_meanwhile(base_url: str, request: Callable[[], Any]) -> tuple[Any, list[float]]:
    """``request``'s result, and the seconds each ``GET /v1/models`` of another client took while it ran."""
    results: list[Any] = []
    running = threading.Thread(target=lambda: results.append(request()))
    running.start()
    waits = []
    with httpx2.Client(base_url=base_url, timeout=20) as other:
        while running.is_alive():
            started = time.monotonic()
            assert other.get("/v1/models").status_code == 200
            waits.append(time.monotonic() - started)
            time.sleep(0.02)
    running.join()
    assert results, "the costly request raised"
    return results[0], waits
