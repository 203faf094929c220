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
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

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

    def close(self) -> None:
        # Celery's WorkController calls it first in every stop, warm or cold (``signal_consumer_close``;
        # its own Consumer has none), before the consumer's channel is closed.
        stop_popping()


def reconnect_interval() -> float:
    """Seconds between one consumer's tries of a lost broker: ``RECONNECT_SECONDS`` or a little more, its own."""
    return RECONNECT_SECONDS * random.uniform(1, 1 + RECONNECT_JITTER)
