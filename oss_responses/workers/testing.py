"""Driving a worker deterministically, in-process (arq's burst idea): no broker, no sleeps.

    with local_worker(settings) as worker:          # engine loop + scripted engine, no reaper
        outcome = run_response_now(response_id, worker=worker)

``run_response_now(response_id, settings)`` without a worker starts one for that single job.
The job runs exactly as the Celery task runs it (same runner), so when it returns the response's
row, its events and its stream's end marker are all written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from oss_responses.config import Settings
from oss_responses.engine.base import Engine
from oss_responses.workers.context import WorkerContext, start_worker
from oss_responses.workers.run_state import Outcome
from oss_responses.workers.runner import run_response


@contextmanager
def local_worker(
    settings: Settings, *, engine: Engine | None = None, with_reaper: bool = False, with_mcp: bool = True
) -> Iterator[WorkerContext]:
    """A worker context in this process (the engine from settings unless given), stopped on exit."""
    ctx = start_worker(settings, engine=engine, with_reaper=with_reaper, with_mcp=with_mcp)
    try:
        yield ctx
    finally:
        ctx.stop()


def run_response_now(
    response_id: str,
    settings: Settings | None = None,
    *,
    worker: WorkerContext | None = None,
    secrets: dict[str, Any] | None = None,
) -> Outcome:
    """Run one response to its end in this thread; its outcome."""
    if worker is not None:
        return run_response(worker, response_id, secrets)
    if settings is None:
        raise TypeError("run_response_now needs settings or a worker")
    with local_worker(settings) as ctx:
        return run_response(ctx, response_id, secrets)
