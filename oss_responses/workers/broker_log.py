"""Celery's consumer's lines for a broker gone away, told as part of the worker's Redis outage.

Killed and restarted for 3 s under two running responses, Redis cost a worker an ERROR line per reconnect
try from Celery's consumer, each three lines long ("consumer: Cannot connect to ...: Error 111 connecting to
127.0.0.1:PORT. Connection refused..", "Trying again in 2.00 seconds... (1/100)", an empty one), beside
the worker's own WARNING for the same outage (``ctx.outages.redis``). Celery's words stay, its retry count
with them: a Celery user knows them, and the count says how far the consumer is from giving up. Each try is
one WARNING line, and a try of the worker's Redis outage (its start told once with the worker's other loops',
its end counting the consumer's tries). Every other line of Celery's keeps its level. The consumer tries
every second (``consumer.py``): a try's line is shown when it begins an outage and then once every
``REMIND_SECONDS`` while it lasts (every try still counted), not 60 lines a minute.

Each reconnect also repeated Celery's notice that ``worker_cancel_long_running_tasks_on_connection_loss``
will default to True in Celery 6, six lines under ``py.warnings``. The app sets it (False,
``celery_app.py``), yet Celery 5.7 warns whenever it is not True: that notice alone is ignored.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable

from celery.exceptions import CPendingDeprecationWarning
from celery.worker.consumer import consumer as celery_consumer

from oss_responses.outage_log import REMIND_SECONDS, OutageLog

CONSUMER_LOGGER = "celery.worker.consumer.consumer"
# Tries further apart than this belong to two outages (a try takes up to the broker's connect timeout, 5 s).
NEW_OUTAGE_GAP_SECONDS = 15.0
# The first words of Celery's notice (``CANCEL_TASKS_BY_DEFAULT``), which starts with a newline.
CANCEL_NOTICE = r"\s*In Celery 5\.1 we introduced an optional breaking change"


class ConsumerReconnectFilter(logging.Filter):
    """Celery's consumer's line per reconnect try as one WARNING line (folded: ``_shown``), and the try told to
    ``outage()`` (the worker's Redis outage, None before the worker has one). Its other lines pass as they are."""

    def __init__(self, outage: Callable[[], OutageLog | None], clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._outage = outage
        self._clock = clock
        self._last_try: float | None = None
        self._shown_at = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.msg != celery_consumer.CONNECTION_ERROR or not isinstance(args, tuple) or len(args) != 3:
            return True  # unpacked blindly, a filter that raised would fail Celery's call, in its consumer's thread
        uri, exc, next_step = args
        if isinstance(exc, Exception) and (outage := self._outage()) is not None:
            outage.failed(exc)  # told before Celery's line: a first try starts the outage's story
        if not self._shown():
            return False
        record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        record.msg = "consumer: Cannot connect to %s: %s. %s"
        record.args = (uri, str(exc).rstrip("."), str(next_step).strip())
        return True

    def _shown(self) -> bool:
        """Whether this try's line is shown: the first of an outage, then one every ``REMIND_SECONDS``."""
        now = self._clock()
        begins = self._last_try is None or now - self._last_try > NEW_OUTAGE_GAP_SECONDS
        self._last_try = now
        if begins or now - self._shown_at >= REMIND_SECONDS:
            self._shown_at = now
            return True
        return False


def tell_reconnects_as_outage(outage: Callable[[], OutageLog | None]) -> None:
    """Installs :class:`ConsumerReconnectFilter` on Celery's consumer's logger, once (the logging set-up may
    run again)."""
    logger = logging.getLogger(CONSUMER_LOGGER)
    for old in [each for each in logger.filters if isinstance(each, ConsumerReconnectFilter)]:
        logger.removeFilter(old)
    logger.addFilter(ConsumerReconnectFilter(outage))


def ignore_cancel_notice() -> None:
    """Celery's notice of a default the app already sets, ignored. Called once Celery's logging set-up ran:
    it puts an ``always`` filter for every ``CPendingDeprecationWarning`` in front of the others."""
    warnings.filterwarnings("ignore", message=CANCEL_NOTICE, category=CPendingDeprecationWarning)
