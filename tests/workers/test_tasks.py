"""The Celery task's set-up (``workers/tasks.py``)."""

from __future__ import annotations

import logging

from celery import Celery
from celery.app import trace as celery_trace
from celery.exceptions import Reject

from oss_responses.workers.tasks import quiet_rejects


def test_reject_task_after_quiet_rejects_logs_line_without_traceback(monkeypatch, caplog) -> None:
    # A task sent back to its queue while its stores were away: Celery logged the Reject with its traceback.
    monkeypatch.setattr(celery_trace, "log_policy_reject", celery_trace.log_policy_reject)  # restored after
    app = Celery("test", broker="memory://", set_as_current=False)

    @app.task(name="rejecting", acks_late=True)
    def rejecting() -> None:
        raise Reject(ConnectionError("Error 111 connecting"), requeue=True)

    quiet_rejects()
    with caplog.at_level(logging.WARNING, logger="celery.app.trace"):
        assert rejecting.apply().state == "REJECTED"
    [record] = [r for r in caplog.records if r.name == "celery.app.trace"]
    assert record.getMessage().endswith("reject requeue=True: Error 111 connecting")
    assert not record.exc_info

