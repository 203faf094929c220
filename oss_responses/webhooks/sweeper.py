"""The sweeper: a delivery whose task was lost is sent again, so every event is delivered at least once.

A delivery is logged ``pending`` before its task is sent; a process that died in between (or a broker that
lost the task, or a retry's countdown) leaves it untouched. Every ``webhook_resend_after_seconds / 2`` (at
most a minute) one worker (a short Redis lock elects it) sends the task again for every delivery still
``pending`` after ``webhook_resend_after_seconds``, or ``retrying`` that long past the longest backoff, with
the logged event (same id, same ``created_at``: the same body). A duplicate of a task that was only slow is
harmless to a receiver that drops ids it has seen.
"""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import timedelta

from redis import Redis

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.outage_log import StoreOutages
from oss_responses.pass_lock import release_pass_lock, take_pass_lock
from oss_responses.storage import Database
from oss_responses.storage.webhook_deliveries import DeliveryRecord, claim_stale
from oss_responses.webhooks.delivery import longest_backoff
from oss_responses.webhooks.events import WebhookDelivery
from oss_responses.webhooks.notify import SendDelivery
from oss_responses.workers.outage import outage

log = logging.getLogger(__name__)



def delivery_of(record: DeliveryRecord) -> WebhookDelivery:
    return WebhookDelivery(record.webhook_id, record.event_type, int(record.created_at.timestamp()),
                           record.response_id, record.endpoint_url)


class WebhookSweeper:
    def __init__(self, settings: Settings, db: Database, redis: Redis, send: SendDelivery, *,
                 outages: StoreOutages | None = None) -> None:
        self._resend_after = settings.webhook_resend_after_seconds
        self._longest_backoff = longest_backoff(settings)
        self.interval = min(60.0, self._resend_after / 2)
        self._db = db
        self._redis = redis
        self._send = send
        self._owner = f"webhook-sweeper:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Its passes' outages, told with the worker's other loops that retry the same stores.
        self._outages = outages or StoreOutages(log)
        self._passed = False  # the last pass won the lock and went through (the database answered it)

    def sweep_once(self) -> int:
        """One pass (if this worker wins the lock); how many deliveries it sent again."""
        lock_ms = max(1000, int(self.interval * 1000))
        self._passed = False
        if not take_pass_lock(self._redis, redis_keys.WEBHOOK_SWEEP_LOCK, self._owner, lock_ms):
            return 0
        try:
            stale = self._db.run(
                claim_stale, pending_for=timedelta(seconds=self._resend_after),
                retrying_for=timedelta(seconds=self._resend_after + self._longest_backoff),
            )
            for record in stale:
                log.warning("webhook %s to %s is still %s: sending it again", record.webhook_id,
                            record.endpoint_url, record.state, extra={"response_id": record.response_id})
                self._send(delivery_of(record).task_args())
            self._passed = True
            return len(stale)
        finally:
            release_pass_lock(self._redis, redis_keys.WEBHOOK_SWEEP_LOCK, self._owner)

    def start(self) -> WebhookSweeper:
        self._thread = threading.Thread(target=self._run, name="webhook-sweeper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sweep_once()
            except Exception as exc:
                if outage(exc):  # a restart: its start and end told, not a traceback a pass while it lasts
                    self._outages.failed(exc)
                else:
                    log.exception("webhook sweep failed")
                continue
            self._outages.pass_answered(read_database=self._passed)
