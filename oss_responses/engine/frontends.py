"""Several worker processes over one vLLM engine core: vLLM's own front-end scale-out, for workers.

One worker process feeds its GPU from one engine-loop thread, which runs vLLM's ``AsyncLLM`` output
processing and this service's translation and event writes for every token. Past some 15-25k tokens/s
(README, "A worker's ceiling") that thread, not the GPU, sets the pace. ``vllm serve --api-server-count
N`` answers the same limit for vLLM's own server: ONE engine core process (scheduler, KV cache, the GPU)
and N front-end processes, each an ``AsyncLLM`` client of that core over ZMQ. With
``OSS_RESPONSES_VLLM_FRONTENDS=N`` the worker command does the same (:func:`serve_frontends`):

- this process becomes a supervisor: it builds vLLM's config once, binds each front end's ZMQ
  listeners, starts the engine core (which loads the model once) and spawns N worker processes;
- each child is an ordinary Celery worker (its own engine loop, task threads, worker id, leases,
  readiness key, cancel listener and reaper) whose ``VllmEngine`` connects to the shared core
  (:meth:`Frontend.connect`) instead of starting one; the engine core batches all their requests;
- the core's ``max_num_seqs`` is N x ``worker_concurrency``: every task thread of every child has its slot.

The group lives and dies together, as vLLM's own server does: SIGTERM or SIGINT to the supervisor
sends SIGTERM to every child (Celery's warm shutdown: running responses are handed off to other
workers; a child that also got the terminal's Ctrl-C is already in that shutdown, and SIGTERM keeps
it warm), then stops the engine core. A child that exits on its own (crashed, killed) stops the
group the same way and the supervisor exits non-zero, so that the orchestrator restarts all of it:
the core cannot take a new front end in place of a lost one. An engine core that exits (a GPU fault,
an OOM kill) stops the group the same way: its clients in the children would not notice. A child never
outlives its supervisor
(the kernel sends it SIGTERM when the supervisor dies). Responses a lost child was running are taken
over by other workers once their leases expire, as for any lost worker.

vLLM's listener sockets reach the children through ``multiprocessing``'s spawn (which passes sockets),
so the children must be this process's own: they cannot be started by hand.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import TYPE_CHECKING, Any

from oss_responses.config import Settings

if TYPE_CHECKING:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

log = logging.getLogger(__name__)

# A child hands off its responses and stops within about a second (README: shutdown). Beyond this it
# is killed (its responses are taken over once their leases expire), leaving the engine core time to
# stop inside an orchestrator's 30 s grace period.
CHILD_STOP_TIMEOUT_S = 20.0
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Frontend:
    """What one child needs to be a client of the shared engine core (picklable, sockets included)."""

    index: int
    count: int
    addresses: dict[str, Any]  # vLLM's client_addresses: ZMQ addresses and the listeners bound for them

    def connect(self, args: AsyncEngineArgs) -> AsyncLLM:
        """This front end's ``AsyncLLM``, a client of the core the supervisor started (on the engine loop)."""
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        args._api_process_count = self.count
        args._api_process_rank = self.index
        config = args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        return AsyncLLM.from_vllm_config(
            config, client_addresses=dict(self.addresses), client_count=self.count, client_index=self.index,
            disable_log_stats=args.disable_log_stats,
        )


class _Stop(Exception):
    """The supervisor was told to stop (SIGTERM or SIGINT)."""


def serve_frontends(settings: Settings, child: Callable[[Frontend], None]) -> int:
    """Start the engine core and ``settings.vllm_frontends`` children running ``child``; wait, then stop.

    Returns the exit status: 0 when told to stop and every child stopped cleanly, else 1.
    """
    from oss_responses.engine.model_runner import keep_v1_model_runner
    from oss_responses.engine.vllm import engine_args
    from oss_responses.vocab import ensure_vocabulary

    ensure_vocabulary(settings.tiktoken_dir)  # the engine core's structured-output processor reads it
    args = engine_args(settings)  # a model folder that is not one fails here, before vLLM is imported
    keep_v1_model_runner()  # the engine core and the front ends inherit it

    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.utils import bind_engine_zmq_listeners

    args._api_process_count = settings.vllm_frontends
    args._api_process_rank = -1  # the supervisor: it starts the core, it is no client of it
    config = args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    group = _Group(bind_engine_zmq_listeners(config, settings.vllm_frontends))
    told_to_stop = False
    with _stop_signals_handled(_raise_stop):
        try:
            group.start(config, not args.disable_log_stats, child)
            log.info("engine core up, %d worker front ends started", len(group.children))
            cores = group.cores()
            ended = _wait_for_any([*group.children, *cores])
            if any(core in ended for core in cores):
                # The front ends' clients of the core do not see it go (vLLM watches only the core
                # processes it started): they would wait for outputs until their stall watch gave up.
                log.error("the engine core exited (%s): stopping the worker front ends",
                          [core.exitcode for core in cores])
            else:
                log.error("a worker front end exited (%s): stopping the others and the engine core",
                          [c.exitcode for c in group.children])
        except _Stop as stop:
            told_to_stop = True
            log.warning("%s: stopping the worker front ends and the engine core", stop)
        finally:
            clean = group.stop()
    return 0 if told_to_stop and clean else 1


@dataclass
class _Group:
    """The engine core and its front-end children, started and stopped together."""

    listeners: Any  # vLLM's EngineZmqListeners: one input and one output listener per front end
    children: list[BaseProcess] = field(default_factory=list)
    launch: Any = None  # vLLM's CoreEngineLaunch: the engine core's processes

    def start(self, config: Any, log_stats: bool, child: Callable[[Frontend], None]) -> None:
        from vllm.v1.engine.utils import launch_core_engines
        from vllm.v1.executor import Executor

        with launch_core_engines(config, Executor.get_class(config), log_stats, self.listeners.addresses) as launch:
            self.launch = launch
            for frontend in _frontends(self.listeners, launch.coordinator):
                self.children.append(_spawn(child, frontend))
            launch.watched_frontend_processes = self.children  # a child dying while the core starts aborts it
        # Leaving the block waited for the engine core to be up (vLLM's startup handshake).

    def cores(self) -> list[BaseProcess]:
        """The engine core's processes (one per data-parallel rank; none before the launch)."""
        manager = None if self.launch is None else self.launch.engine_manager
        return list(manager.processes) if manager is not None else []

    def stop(self) -> bool:
        """Children first (they hand off their responses), then the core; True if all children exited 0."""
        # A second signal while the children stop must not interrupt the wait (they are handing off).
        with _stop_signals_handled(signal.SIG_IGN):
            clean = _stop_children(self.children)
            if self.launch is not None and self.launch.engine_manager is not None:
                self.launch.engine_manager.shutdown()
            if self.launch is not None and self.launch.coordinator is not None:
                self.launch.coordinator.shutdown()
            for listener in (*self.listeners.inputs, *self.listeners.outputs):
                listener.cleanup()
            self.listeners = None  # vLLM's __del__ then runs now, not at exit (where it fails)
        return clean


def _frontends(listeners: Any, coordinator: Any) -> Iterator[Frontend]:
    count = len(listeners.inputs)
    for index, (inputs, outputs) in enumerate(zip(listeners.inputs, listeners.outputs, strict=True)):
        addresses: dict[str, Any] = {
            "input_address": inputs.address, "output_address": outputs.address,
            "input_listener": inputs.socket, "output_listener": outputs.socket,
        }
        if coordinator is not None:
            addresses["stats_update_address"] = coordinator.get_stats_publish_address()
        yield Frontend(index=index, count=count, addresses=addresses)


def _spawn(child: Callable[[Frontend], None], frontend: Frontend) -> BaseProcess:
    # spawn, not fork: the child starts clean (no copy of vLLM's threads) and receives the sockets.
    process = multiprocessing.get_context("spawn").Process(
        target=_child_main, args=(child, frontend), name=f"frontend-{frontend.index}"
    )
    process.start()
    return process


def _child_main(child: Callable[[Frontend], None], frontend: Frontend) -> None:
    _die_with_parent()
    child(frontend)


def _die_with_parent() -> None:
    """SIGTERM (a warm shutdown) to this process when the supervisor dies, however it died (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the child then outlives a killed supervisor
        log.warning("could not ask to be stopped with the supervisor", exc_info=True)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


@contextmanager
def _stop_signals_handled(handler: Callable[[int, FrameType | None], None] | int) -> Iterator[None]:
    """SIGTERM and SIGINT go to ``handler`` (a function, or ``signal.SIG_IGN``) inside the block."""
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


def _wait_for_any(processes: Sequence[BaseProcess]) -> list[BaseProcess]:
    """Until one of ``processes`` exits; those that have."""
    ended = multiprocessing.connection.wait([process.sentinel for process in processes])
    return [process for process in processes if process.sentinel in ended]


def _stop_children(children: Sequence[BaseProcess]) -> bool:
    """SIGTERM to every child still running, wait, kill what is left; True if all exited with 0."""
    for child in children:
        if child.is_alive() and child.pid is not None:
            os.kill(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + CHILD_STOP_TIMEOUT_S
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            log.error("worker front end %s did not stop in %.0f s: killed", child.name, CHILD_STOP_TIMEOUT_S)
            child.kill()
            child.join()
    return all(child.exitcode == 0 for child in children)
