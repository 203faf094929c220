"""``python -m oss_responses.workers``, plus the latency the worker adds to every token event.

Bench-only, no production code changes: before the worker starts, this patches (in this process)
- ``oss_responses.engine.vllm.engine_output``: called by ``VllmEngine.generate`` the moment vLLM hands
  over a request's output; it puts that time into a context variable of the response's task (an
  async generator runs in its consumer's context, so the Generation sees it);
- ``EventWriter.append``: notes that time for each event built from that output;
- ``EventWriter._send``: once the pipelined write to Redis returned, records
  ``written_at - engine_output_at`` for every event of the batch (seconds), appended to
  ``$BENCH_TRACE_FILE`` by a thread every 0.1 s. Times are ``time.monotonic()``.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections import deque
from typing import Any

from oss_responses import redis_keys
from oss_responses.engine import vllm as vllm_module
from oss_responses.eventlog import writer as writer_module

OUTPUT_AT: contextvars.ContextVar[float | None] = contextvars.ContextVar("output_at", default=None)
_pending: dict[tuple[str, str], float] = {}
_latencies: deque[float] = deque()

_engine_output = vllm_module.engine_output
_append = writer_module.EventWriter.append
_send = writer_module.EventWriter._send


def _traced_engine_output(output: Any, first: bool) -> Any:
    OUTPUT_AT.set(time.monotonic())
    return _engine_output(output, first)


def _traced_append(self: writer_module.EventWriter, response_id: str, events: Any) -> None:
    events = list(events)
    output_at = OUTPUT_AT.get()
    if output_at is not None:
        key = redis_keys.events(response_id)
        for event in events:
            _pending[(key, redis_keys.event_id(event.sequence_number))] = output_at
    _append(self, response_id, events)


async def _traced_send(self: writer_module.EventWriter, batch: Any) -> None:
    sent = [(str(cmd[1]), str(cmd[2])) for cmd in batch.commands if cmd[0] == "XADD"]
    await _send(self, batch)
    written_at = time.monotonic()
    for entry in sent:
        output_at = _pending.pop(entry, None)
        if output_at is not None:
            _latencies.append(written_at - output_at)


def _dump_forever(path: str) -> None:
    with open(path, "a") as out:
        while True:
            time.sleep(0.1)
            values = [_latencies.popleft() for _ in range(len(_latencies))]
            if values:
                out.write("".join(f"{value:.6f}\n" for value in values))
                out.flush()


def main() -> None:
    vllm_module.engine_output = _traced_engine_output  # type: ignore[assignment]
    writer_module.EventWriter.append = _traced_append  # type: ignore[method-assign]
    writer_module.EventWriter._send = _traced_send  # type: ignore[method-assign]
    threading.Thread(target=_dump_forever, args=(os.environ["BENCH_TRACE_FILE"],), daemon=True).start()
    from oss_responses.workers.__main__ import main as worker_main

    worker_main()


if __name__ == "__main__":
    main()
