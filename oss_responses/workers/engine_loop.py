"""One asyncio event loop in its own thread: where the engine and every running response live.

vLLM's AsyncLLM (and the scripted engine) are driven from a single event loop, while Celery runs each
task in a pool thread. A task thread submits its response's coroutine here and blocks on the
returned :class:`concurrent.futures.Future`; many responses share the loop (and the engine) at once.

The loop thread shares the GIL with Celery's threads. With CPython's default 5 ms switch interval, a
loop that gives the GIL up on every socket write or select (many times per engine step) then waits up
to 5 ms to get it back from whichever thread took it (a "convoy"): measured, the loop idled half the
time and one worker relayed half the events it can. Starting the loop shortens the interval for the
process (:data:`GIL_SWITCH_INTERVAL_S`).

The loop is uvloop's, as vLLM's own API server runs AsyncLLM: at 8 streams paced like a GPU
(bench/worker_ceiling.py --streams 8 --step-ms 4.6) the loop thread spent 38 us per token on it
against 42-44 on asyncio's own loop, whose per-iteration bookkeeping is Python.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import uvloop

from oss_responses.stopping import cancel_and_wait

T = TypeVar("T")

GIL_SWITCH_INTERVAL_S = 0.0005  # CPython's default is 0.005


class LoopStopped(RuntimeError):
    """The engine loop is stopping or gone: a coroutine submitted now is refused, and one it held was
    cancelled by its stop. A task thread freed after the worker stopped (from a stopped tokenizer child, say)
    meets this, and does without the loop (``runner``)."""


class EngineLoop:
    def __init__(self, name: str = "engine-loop") -> None:
        self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()
        # Held while a coroutine is scheduled and while the loop is told to stop: a coroutine is
        # either scheduled before the stop (and cancelled by it, so its waiter wakes) or refused.
        # Scheduled after the stop, it would never run and its task thread would wait forever.
        self._scheduling = threading.Lock()
        self._stopping = False

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()
        self._cancel_leftovers()
        self.loop.close()

    def _cancel_leftovers(self) -> None:
        # Cancelled until done: a task inside a redis-py command can miss one cancel (stopping.py).
        tasks = asyncio.all_tasks(self.loop)
        if tasks:
            self.loop.run_until_complete(asyncio.gather(*(cancel_and_wait(task) for task in tasks)))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())

    def start(self) -> EngineLoop:
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))
        self._thread.start()
        self._started.wait()
        return self

    @property
    def running(self) -> bool:
        return not self._stopping and self._thread.is_alive() and self.loop.is_running()

    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with self._scheduling:
            if not self.running:
                coro.close()
                raise LoopStopped("the engine loop is not running")
            return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Queue ``callback`` on the loop without waiting for it (from any thread); it runs before
        whatever this thread submits after."""
        with self._scheduling:
            if not self.running:
                raise LoopStopped("the engine loop is not running")
            self.loop.call_soon_threadsafe(callback)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (from any thread but the loop's own)."""
        if self.in_loop():
            coro.close()
            raise RuntimeError("EngineLoop.run called from the engine loop itself: await instead")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise
        except concurrent.futures.CancelledError:
            if self._stopping:  # cancelled by the stop, not by its caller
                raise LoopStopped("the engine loop stopped while it ran the coroutine") from None
            raise

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop: pending tasks are cancelled, async generators closed, the thread joined."""
        with self._scheduling:
            if self._stopping or not self._thread.is_alive():
                return
            self._stopping = True
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
