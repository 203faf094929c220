"""The worker's pool: Celery's threads pool, taught what terminating a task means here.

A thread cannot be killed, and Celery's threads pool says so by raising: ``celery control revoke ID
--terminate`` of a running response's task failed in the worker's control handler with a traceback
(``NotImplementedError: ... does not implement kill_job``), and the response ran on. Here terminating a
running task is a no-op in the pool; Celery then sends ``task_revoked`` with ``terminated=True``, and
the worker cancels the response as a client's cancel would (``tasks._cancel_revoked``): its thread
ends with it.

Celery's autoscaler cannot size it either (``--autoscale``; :func:`refuse_autoscale`).
"""

from __future__ import annotations

from typing import Any

from celery.concurrency.thread import ApplyResult, TaskPool

# The app's ``worker_pool``: Celery's ``--pool`` takes only its own names, and without it uses this.
POOL = "oss_responses.workers.pool:ThreadsPool"


class UnsupportedOption(RuntimeError):
    """A ``celery worker`` option this worker cannot honour; the worker must not serve."""


def refuse_autoscale(worker: Any) -> None:
    """Raises :class:`UnsupportedOption` for ``--autoscale``. Celery's autoscaler grows and shrinks the pool,
    which a threads pool cannot (it has no ``grow``): the worker stopped at its first task ("Unrecoverable error:
    'ThreadsPool' object has no attribute 'grow'"), put that task back on the queue and stopped again at every
    start. The pool's size is the engine's (vLLM's ``max_num_seqs``), fixed when the engine starts."""
    if worker.autoscale:
        raise UnsupportedOption(
            f"--autoscale={','.join(map(str, worker.autoscale))} is not supported: the pool is "
            "OSS_RESPONSES_WORKER_CONCURRENCY threads (vLLM's max_num_seqs, fixed when its engine starts); set that"
        )


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
