"""The worker's consumer: Celery's, trying a lost broker again every second rather than ever more slowly.

Celery's consumer passes no intervals to kombu's ``ensure_connection``, whose defaults wait 2 s, then 4, 6,
... up to 30 s between tries: a worker took tasks again 2.9 s after a 3 s Redis restart had ended (a takeover
dispatched at once waited for it, measured), up to 30 s after a longer one, every new response queued
meanwhile. It tries every ``RECONNECT_SECONDS`` instead, for as long as Celery's 100 tries took (~46 min)
before the worker gives up and exits: ``MAX_RETRIES`` tries, or ``GIVE_UP_SECONDS`` where each try waits for a
silent broker's connect timeout. Its line per try is folded (``broker_log.py``). Each reconnect's interval is
drawn up to ``RECONNECT_JITTER`` above it (kombu sleeps fractions of a second too), so that a fleet of workers
that lost the same Redis at the same instant does not try it again in step; never below it, where Celery's line
would say "Trying again now".

Every stop ends the consumer's pending BRPOP at once (``close``). The ``worker_shutting_down`` signal does it
for SIGTERM and Ctrl-C (``tasks.py``), but ``celery control shutdown`` and SIGQUIT send no such signal, and a
SIGTERM's loop may pop once more before it sees the stop: the channel's close then read the pop's answer
when its 1 s timeout came.

A message whose headers name a task but whose request Celery cannot build (no task id; a body that is not
protocol 2's ``[args, kwargs, embed]``, or none) is refused as Celery refuses an invalid one: its line, and the
message dropped (``check_task_message``). Celery's handler raised instead: a ``KeyError`` (kombu counts it among
the connection errors) had the consumer reconnect for good, ~5 times a second, the message put back each time;
anything else stopped the worker, and the message, recorded as unacknowledged, went back on the queue as it
stopped, stopping every worker that took it next.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

from celery.exceptions import InvalidTaskError
from celery.worker.consumer import consumer as celery_consumer

from oss_responses.broker import stop_popping

CONSUMER = f"{__name__}:Consumer"
RECONNECT_SECONDS = 1.0
RECONNECT_JITTER = 0.25  # a fraction of RECONNECT_SECONDS, added
GIVE_UP_SECONDS = 2790.0  # kombu's 2, 4, ... 30 s apart, 100 tries
MAX_RETRIES = 2800


class Consumer(celery_consumer.Consumer):  # type: ignore[misc]  # Celery ships no types: its base is Any
    def ensure_connected(self, conn: Any) -> Any:
        interval = reconnect_interval()
        conn.ensure_connection = partial(conn.ensure_connection, interval_start=interval,
                                         interval_step=0, interval_max=interval, timeout=GIVE_UP_SECONDS)
        return super().ensure_connected(conn)

    def update_strategies(self) -> None:
        super().update_strategies()
        for name, strategy in self.strategies.items():
            self.strategies[name] = partial(_checked_first, strategy)

    def close(self) -> None:
        # Celery's WorkController calls it first in every stop, warm or cold (``signal_consumer_close``;
        # its own Consumer has none), before the consumer's channel is closed.
        stop_popping()


def reconnect_interval() -> float:
    """Seconds between one consumer's tries of a lost broker: ``RECONNECT_SECONDS`` or a little more, its own."""
    return RECONNECT_SECONDS * random.uniform(1, 1 + RECONNECT_JITTER)


def _checked_first(strategy: Any, message: Any, body: Any, *args: Any, **kwargs: Any) -> Any:
    check_task_message(message, body)
    return strategy(message, body, *args, **kwargs)


def check_task_message(message: Any, body: Any) -> None:
    """Raises Celery's ``InvalidTaskError`` for a task message its request cannot be built from (what
    ``celery.worker.request.Request`` reads without a default). ``body``: a protocol 1 message's, decoded by
    Celery's handler, else None; a protocol 2 body is decoded here, as Celery's strategy would (a body that
    does not decode is Celery's own ``DecodeError``, which it refuses)."""
    if body is not None:  # protocol 1: its id is in its body, which Celery's own strategy checks
        return
    if "id" not in message.headers:
        raise InvalidTaskError("its headers name no task id")
    payload = message.payload
    if isinstance(payload, dict) and "args" in payload:  # Celery's hybrid of protocols 1 and 2: its own checks
        return
    if not (isinstance(payload, list | tuple) and len(payload) == 3):
        raise InvalidTaskError(f"its body is not [args, kwargs, embed]: {payload!r:.200}")
