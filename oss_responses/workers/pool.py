"""The worker's pool: Celery's threads pool, taught what terminating a task means here.

A thread cannot be killed, and Celery's threads pool says so by raising: ``celery control revoke ID
--terminate`` of a running response's task failed in the worker's control handler with a traceback
(``NotImplementedError: ... does not implement kill_job``), and the response ran on. Here terminating a
running task is a no-op in the pool; Celery then sends ``task_revoked`` with ``terminated=True``, and
the worker cancels the response as a client's cancel would (``tasks._cancel_revoked``): its thread
ends with it.
"""

from __future__ import annotations

from typing import Any

from celery.concurrency.thread import ApplyResult, TaskPool

# The app's ``worker_pool``: Celery's ``--pool`` takes only its own names, and without it uses this.
POOL = "oss_responses.workers.pool:ThreadsPool"


class _Result(ApplyResult):  # type: ignore[misc]  # Celery ships no types
    def terminate(self, signal: int | None = None) -> None:
        """Celery terminates the result after the job: the response's cancel ends the thread."""


class ThreadsPool(TaskPool):  # type: ignore[misc]  # Celery ships no types: its base is Any
    def terminate_job(self, pid: int, signal: int | None = None) -> None:
        """Nothing to kill: ``task_revoked`` (terminated) cancels the response that the task runs."""

    def on_stop(self) -> None:
        """Without waiting for the running tasks. Celery's SIGQUIT handler stops the pool before it tells
        the worker it is shutting down: waiting there, it ran every response to its end before any was
        handed off. The engine step waits for the task threads instead, once they hand off (``context.py``)."""
        self.executor.shutdown(wait=False, cancel_futures=True)

    def on_apply(self, *args: Any, **kwargs: Any) -> _Result:
        return _Result(super().on_apply(*args, **kwargs).f)
