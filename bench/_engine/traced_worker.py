"""``python -m oss_responses.workers``, plus the latency the worker adds to every token event.

Without ``$BENCH_TRACE_FILE`` it is the production worker, nothing patched: with
``$BENCH_THREADS_FILE`` a thread wakes once a second to write the worker's thread names (below).

Bench-only, no production code changes: with ``$BENCH_TRACE_FILE``, before the worker starts, this
patches (in this process)
- ``oss_responses.engine.vllm.engine_output``: called by ``VllmEngine.stream``'s feed the moment vLLM
  hands over a request's output; it puts that time into a context variable of the response's task
  (the feed runs in that task's context, and the Generation's appends with it);
- ``EventWriter.append``: notes that time for each event built from that output;
- ``EventWriter._replied``: once Redis answered a flush, records
  ``written_at - engine_output_at`` for every event of the batch (seconds), appended to
  ``$BENCH_TRACE_FILE`` by a thread every 0.1 s. Times are ``time.monotonic()``.

With ``$BENCH_STAGE_FILE`` it also writes ``stage response_id t`` lines: when each response's task
message reached the worker (``received``), its task thread started (``started``), its row and chain
were loaded (``loaded``), its lease was taken (``leased``), its prompt rendered (``rendered``), it
was in_progress (``in_progress``), the engine's ``stream`` ran (``generate``), vLLM got the request
(``submitted``: ``AsyncLLM.add_request``), vLLM's first output came (``first_output``), the first
output that made an event came (``event_output``: harmony's header tokens, ``<|channel|>analysis``,
make none, so this is a decode step or two later) and its events were in Redis (``first_written``:
Redis's reply read; these are the new item's ``output_item.added`` and ``content_part.added``), then
the same for the first output that made a ``*.delta`` event, the first a client counts
(``delta_output``, ``delta_written``: a decode step after the first, as the item opens on the
``<|message|>`` token and its text starts with the next): the split of the time to first token on the
worker's side. With ``$BENCH_THREADS_FILE`` it keeps there the name of every Python thread by its kernel id
(``native_id name`` lines), so a bench can tell whose CPU is whose.
"""

from __future__ import annotations

import contextvars
import itertools
import os
import threading
import time
from collections import deque
from typing import Any

from oss_responses import redis_keys
from oss_responses.engine import vllm as vllm_module
from oss_responses.eventlog import writer as writer_module
from oss_responses.eventlog.bulk import event_entries

OUTPUT_AT: contextvars.ContextVar[float | None] = contextvars.ContextVar("output_at", default=None)
_pending: dict[tuple[str, str], float] = {}
_latencies: deque[float] = deque()

_stages: deque[str] = deque()
_first_written: set[str] = set()
_first_delta: dict[tuple[str, str], float] = {}  # each response's first *.delta event, until written
_delta_seen: set[str] = set()


def _stage(name: str, response_id: str, at: float | None = None) -> None:
    _stages.append(f"{name} {response_id.split(':')[0]} {time.monotonic() if at is None else at:.6f}\n")


_engine_output = vllm_module.engine_output
_append = writer_module.EventWriter.append
_replied = writer_module.EventWriter._replied


def _traced_engine_output(output: Any, first: bool) -> Any:
    OUTPUT_AT.set(time.monotonic())
    if first:
        _stage("first_output", output.request_id)
    return _engine_output(output, first)


def _traced_append(self: writer_module.EventWriter, response_id: str, events: Any) -> None:
    events = list(events)
    output_at = OUTPUT_AT.get()
    if output_at is not None:
        key = redis_keys.events(response_id)
        for event in events:
            entry = (key, redis_keys.event_id(event.sequence_number))
            _pending[entry] = output_at
            if event.type.endswith(".delta") and key not in _delta_seen:
                _delta_seen.add(key)
                _first_delta[entry] = output_at
    _append(self, response_id, events)


def _traced_replied(self: writer_module.EventWriter, pipe: Any, batch: Any, *args: Any) -> None:
    sent = event_entries(batch.commands)  # before the batch is settled (which empties it)
    _replied(self, pipe, batch, *args)
    written_at = time.monotonic()
    for entry in sent:
        delta_output_at = _first_delta.pop(entry, None)
        if delta_output_at is not None:
            response_id = entry[0].rsplit(":", 1)[-1]
            _stage("delta_output", response_id, delta_output_at)
            _stage("delta_written", response_id)
        output_at = _pending.pop(entry, None)
        if output_at is not None:
            _latencies.append(written_at - output_at)
            if entry[0] not in _first_written:
                _first_written.add(entry[0])
                response_id = entry[0].rsplit(":", 1)[-1]
                _stage("event_output", response_id, output_at)
                _stage("first_written", response_id)


def _dump_forever(path: str, stage_path: str | None, threads_path: str | None) -> None:
    with open(path, "a") as out, open(stage_path or os.devnull, "a") as stages:
        for tick in itertools.count():
            time.sleep(0.1)
            if threads_path and tick % 10 == 0:
                _write_thread_names(threads_path)
            values = [_latencies.popleft() for _ in range(len(_latencies))]
            if values:
                out.write("".join(f"{value:.6f}\n" for value in values))
                out.flush()
            lines = [_stages.popleft() for _ in range(len(_stages))]
            if lines:
                stages.write("".join(lines))
                stages.flush()


def _write_thread_names(path: str) -> None:
    """``native_id name`` of every Python thread now (the kernel knows them all as ``python``)."""
    names = "".join(f"{thread.native_id} {thread.name.replace(' ', '_')}\n" for thread in threading.enumerate())
    with open(f"{path}.new", "w") as f:
        f.write(names)
    os.replace(f"{path}.new", path)


def _trace_stages() -> None:
    """Wraps the worker's steps from task message to vLLM request (see the module docstring)."""
    from celery import signals
    from vllm.v1.engine.async_llm import AsyncLLM

    from oss_responses.workers import on_loop, runner

    signals.task_received.connect(lambda request, **_: _stage("received", request.args[0]), weak=False)
    run_response, load_job, execute = runner.run_response, runner.load_job, runner._execute
    claim, render_early, render = runner.claim, runner.render_early, on_loop._render

    def traced_claim(redis: Any, lease: Any, response_id: str) -> Any:
        taken = claim(redis, lease, response_id)
        _stage("leased", response_id)
        return taken

    def traced_render_early(ctx: Any, job: Any) -> Any:
        prompt = render_early(ctx, job)
        _stage("rendered", job.response_id)
        return prompt

    async def traced_render(run: Any, *args: Any) -> None:
        rendered_here = run.early_prompt is None
        await render(run, *args)
        if rendered_here:
            _stage("rendered", run.job.response_id)

    def traced_run_response(ctx: Any, response_id: str, secrets: Any = None) -> Any:
        _stage("started", response_id)
        return run_response(ctx, response_id, secrets)

    def traced_load_job(db: Any, response_id: str, *args: Any) -> Any:
        job = load_job(db, response_id, *args)
        _stage("loaded", response_id)
        return job

    def traced_execute(run: Any, steps: Any = None) -> Any:
        _stage("in_progress", run.job.response_id)
        return execute(run, steps)

    def wrap_call(original: Any, name: str) -> Any:
        async def traced(self: Any, request_id: str, *args: Any, **kwargs: Any) -> Any:
            _stage(name, request_id)
            return await original(self, request_id, *args, **kwargs)
        return traced

    runner.run_response, runner.load_job, runner._execute = traced_run_response, traced_load_job, traced_execute
    runner.claim, runner.render_early, on_loop._render = traced_claim, traced_render_early, traced_render
    vllm_module.VllmEngine.stream = wrap_call(vllm_module.VllmEngine.stream, "generate")  # type: ignore[method-assign]
    AsyncLLM.add_request = wrap_call(AsyncLLM.add_request, "submitted")  # type: ignore[method-assign]


def _name_threads_forever(threads_path: str) -> None:
    while True:
        _write_thread_names(threads_path)
        time.sleep(1.0)


def _trace(trace_file: str, threads_file: str | None) -> None:
    vllm_module.engine_output = _traced_engine_output  # type: ignore[assignment]
    writer_module.EventWriter.append = _traced_append  # type: ignore[method-assign]
    writer_module.EventWriter._replied = _traced_replied  # type: ignore[method-assign]
    stage_file = os.environ.get("BENCH_STAGE_FILE")
    if stage_file:
        _trace_stages()
    threading.Thread(target=_dump_forever, args=(trace_file, stage_file, threads_file),
                     daemon=True, name="bench-trace").start()


def main() -> None:
    threads_file = os.environ.get("BENCH_THREADS_FILE")
    trace_file = os.environ.get("BENCH_TRACE_FILE")
    if trace_file:
        _trace(trace_file, threads_file)
    elif threads_file:
        threading.Thread(target=_name_threads_forever, args=(threads_file,), daemon=True,
                         name="bench-thread-names").start()
    from oss_responses.workers.__main__ import main as worker_main

    worker_main()


if __name__ == "__main__":
    main()
