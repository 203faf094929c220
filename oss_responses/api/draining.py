"""An API process ends its open SSE streams as soon as it is told to stop.

uvicorn, told to stop (SIGTERM, SIGINT), closes its listening sockets and then waits for every open
connection to finish before it runs the app's shutdown. An SSE stream of a queued or long response
would hold it for as long as the response runs, and a deploy would wait for its kill. So while the
app runs, the stop signals uvicorn handles also end the event hub's client streams (a client resumes
one with ``starting_after`` elsewhere): uvicorn's handler runs first (it marks the server as exiting),
then the hub's, on the event loop. A plain request waiting for its response's end is not cut: its
client could not resume it, so uvicorn waits for its answer as for any request in flight. This is the same in a
single process (``api/server.py``) and under uvicorn's supervisor, whose processes serve with
uvicorn's own server. An app served from another thread (the tests' servers) gets no signals, and its
streams end with the hub at the app's shutdown.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # uvicorn's HANDLED_SIGNALS on POSIX


@contextmanager
def on_stop_signals(callback: Callable[[], None]) -> Iterator[None]:
    """While inside, a stop signal runs the handler it had (the server's), then ``callback`` on this
    event loop. Signals that nobody handles (the default: the process dies) are left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous: dict[int, Any] = {}

    def handle(sig: int, frame: FrameType | None) -> None:
        previous[sig](sig, frame)
        loop.call_soon_threadsafe(callback)

    for sig in STOP_SIGNALS:
        handler = signal.getsignal(sig)
        if callable(handler):
            previous[sig] = handler
            signal.signal(sig, handle)
    try:
        yield
    finally:
        for number, handler in previous.items():
            if signal.getsignal(number) is handle:
                signal.signal(number, handler)
