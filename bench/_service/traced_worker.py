"""``python -m oss_responses.workers``, plus a trace of when the scripted engine emitted each event.

Bench-only, no production code changes: before the worker starts, this patches (in this process)
- ``StepClock._step_all``: notes the time of each step tick (the moment every running response's
  token is released, as one continuous-batching step), in a context variable of the clock's task
  (where the responses that ``stream`` are stepped) and by the tick future (the ones that ``generate``);
- ``ScriptedEngine._wait_turn``: puts the time of the tick this response's token was released on
  into a context variable of the response's task (without a clock: the time its turn came);
- ``EventWriter.append``: records ``E response_id first_sequence_number count emitted_at`` for the
  events built from that token (``-`` for events no tick released: a response's start and end);
- ``EventWriter._write``: records ``W sent response_id...`` for a flush when it was written to the
  writer's connection (its reply is not waited for there), naming the responses whose events it holds:
  every event they were given since their previous flush;
a thread appends the records, in the order they happened, to ``$BENCH_TRACE_FILE`` every 0.1 s. The
bench uses them to split the added latency into the worker's part and the rest (Redis, API, client).
Until 2026-12-06 the trace recorded every event twice and parsed each flush's packed commands to
name its events: 10-14 us of the worker's CPU per event (phase (b): 97-114 us per relayed delta against
87-99 for the untraced production worker, three alternated pairs), paid on the engine loop during the
very steps whose latency it measured.
Times are ``time.monotonic()`` (CLOCK_MONOTONIC, one clock for every process on the machine).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import time
from collections import deque
from typing import Any

from oss_responses.engine import scripted
from oss_responses.eventlog import writer as writer_module

EMITTED_AT: contextvars.ContextVar[float | None] = contextvars.ContextVar("emitted_at", default=None)
# In the order they happened: ("E", response id, first sequence number, count, step tick or None) per
# append, ("W", time, response ids) per flush written.
_log: deque[tuple[Any, ...]] = deque()
_tick_times: dict[Any, float] = {}


_step_all = scripted.StepClock._step_all


def _traced_step_all(self: scripted.StepClock) -> None:  # StepClock._step_all, noting the tick's time
    now = time.monotonic()
    EMITTED_AT.set(now)  # the clock's task steps the streamed responses: their events read it here
    if self._tick is not None:
        _tick_times[self._tick] = now
        if len(_tick_times) > 64:
            del _tick_times[next(iter(_tick_times))]
    _step_all(self)


async def _wait_turn(self: scripted.ScriptedEngine, request: Any) -> bool:  # same logic, timed
    if self.delay > 0:
        await asyncio.wait({request.aborted}, timeout=self.delay)
    if self.clock is not None:
        if not request.aborted.done():
            tick = self.clock.next_tick()
            await tick
            EMITTED_AT.set(_tick_times.get(tick, time.monotonic()))
            return request.aborted.done()
    elif self.delay == 0:
        await asyncio.sleep(0)
    EMITTED_AT.set(time.monotonic())
    return request.aborted.done()


_append = writer_module.EventWriter.append


def _traced_append(self: writer_module.EventWriter, response_id: str, events: Any) -> None:
    events = events if isinstance(events, list | tuple) else list(events)
    if events:  # one record per call, not per event: the trace's own cost is the worker's while it runs
        _log.append(("E", response_id, events[0].sequence_number, len(events), EMITTED_AT.get()))
    _append(self, response_id, events)


_write = writer_module.EventWriter._write


def _traced_write(self: writer_module.EventWriter, pipe: Any, batch: Any) -> None:
    # The batch holds every event its responses were given since their last batch was written (the batch in
    # hand is swapped out as it is written), so naming its responses says which events went out now.
    responses = [group.owner[0] for group in (*batch.retired, *batch.groups.values())]
    _write(self, pipe, batch)
    _log.append(("W", time.monotonic(), responses))


def _dump_forever(path: str) -> None:
    with open(path, "a", buffering=1 << 16) as out:
        while True:
            time.sleep(0.1)
            lines = []
            while _log:
                record = _log.popleft()
                if record[0] == "E":
                    _, rid, first, count, at = record
                    lines.append(f"E {rid} {first} {count} {'-' if at is None else f'{at:.6f}'}\n")
                else:
                    _, at, responses = record
                    lines.append(f"W {at:.6f} {' '.join(responses)}\n")
            out.write("".join(lines))
            out.flush()


def main() -> None:
    scripted.StepClock._step_all = _traced_step_all  # type: ignore[method-assign]
    scripted.ScriptedEngine._wait_turn = _wait_turn  # type: ignore[method-assign]
    writer_module.EventWriter.append = _traced_append  # type: ignore[method-assign]
    writer_module.EventWriter._write = _traced_write  # type: ignore[method-assign]
    threading.Thread(target=_dump_forever, args=(os.environ["BENCH_TRACE_FILE"],), daemon=True).start()
    from oss_responses.workers.__main__ import main as worker_main

    worker_main()


if __name__ == "__main__":
    main()
