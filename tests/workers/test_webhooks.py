"""Webhooks delivered by a real Celery worker (``python -m oss_responses.workers``) to a real HTTP endpoint
that verifies each delivery's signature with the openai SDK (``client.webhooks.unwrap``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis as redis_lib
from openai.types.webhooks import (
    ResponseCancelledWebhookEvent,
    ResponseCompletedWebhookEvent,
    ResponseFailedWebhookEvent,
    ResponseIncompleteWebhookEvent,
)
from support import MODEL
from support.streams import wait_for_end
from support.webhook_receiver import WebhookReceiver
from support.workers import accept, overwrite_row, worker_settings

from oss_responses import redis_keys
from oss_responses.config import Settings, WebhookEndpoint
from oss_responses.storage import Database
from oss_responses.storage.webhook_deliveries import add_pending, list_deliveries
from oss_responses.webhooks.events import WebhookDelivery, event_id
from oss_responses.webhooks.notify import log_rows
from oss_responses.workers.celery_app import enqueue, make_celery

BACKOFF_S = 0.2


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    endpoint = WebhookReceiver().start()
    yield endpoint
    endpoint.stop()


def _settings(database_url: str, redis_url: str, *receivers: WebhookReceiver, max_attempts: int = 10) -> Settings:
    endpoints = [WebhookEndpoint(url=r.url, secret=r.secret) for r in receivers]
    return worker_settings(database_url, redis_url, webhook_endpoints=endpoints, webhook_backoff_seconds=BACKOFF_S,
                           webhook_max_attempts=max_attempts)


def _run(db: Database, redis: redis_lib.Redis, settings: Settings, **body: object) -> str:
    response_id = accept(db, redis, settings, **body)
    enqueue(make_celery(settings), settings, response_id, MODEL)
    wait_for_end(redis, response_id)
    return response_id


def _wait_state(db: Database, response_id: str, state: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = db.run(list_deliveries, response_id=response_id)
        if records and all(record.state == state for record in records):
            return
        time.sleep(0.05)
    raise TimeoutError(f"deliveries of {response_id}: {db.run(list_deliveries, response_id=response_id)}")


def test_deliver_completed_webhook_signed_for_background_response(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker, receiver: WebhookReceiver
) -> None:  # type: ignore[no-untyped-def]
    settings = _settings(database_url, redis_url, receiver)
    db = Database(settings.database_url)
    start_worker(settings, "hooks")
    response_id = _run(db, redis, settings, input="hello hooks", background=True)

    [delivery] = receiver.wait_for(1)
    assert delivery.error is None  # the SDK verified the signature
    assert isinstance(delivery.event, ResponseCompletedWebhookEvent)
    assert delivery.event.data.id == response_id
    assert delivery.headers["webhook-id"] == delivery.event.id == event_id(response_id, "response.completed")
    _wait_state(db, response_id, "delivered")
    [record] = db.run(list_deliveries, response_id=response_id)
    assert (record.attempts, record.last_status, record.delivered_at is not None) == (1, 200, True)
    db.dispose()


def test_deliver_webhook_retries_with_same_webhook_id_until_endpoint_answers(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    receiver = WebhookReceiver(fail_first=2).start()
    try:
        settings = _settings(database_url, redis_url, receiver)
        db = Database(settings.database_url)
        start_worker(settings, "retries")
        response_id = _run(db, redis, settings, input="retry me", background=True)

        deliveries = receiver.wait_for(3)
        assert [d.answered for d in deliveries] == [500, 500, 200]
        assert len({d.headers["webhook-id"] for d in deliveries}) == 1
        assert len({d.body for d in deliveries}) == 1  # the same event, re-signed per attempt
        assert all(d.error is None for d in deliveries)
        _wait_state(db, response_id, "delivered")
        [record] = db.run(list_deliveries, response_id=response_id)
        assert (record.attempts, record.last_error) == (3, None)
        db.dispose()
    finally:
        receiver.stop()


def test_deliver_webhook_gives_up_after_max_attempts(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    receiver = WebhookReceiver(fail_first=100).start()
    try:
        settings = _settings(database_url, redis_url, receiver, max_attempts=2)
        db = Database(settings.database_url)
        start_worker(settings, "give-up")
        response_id = _run(db, redis, settings, input="never delivered", background=True)

        receiver.wait_for(2)
        _wait_state(db, response_id, "failed")
        [record] = db.run(list_deliveries, response_id=response_id, failed=True)
        assert (record.attempts, record.last_status) == (2, 500)
        assert "HTTP 500" in (record.last_error or "")
        time.sleep(4 * BACKOFF_S)
        assert len(receiver.deliveries) == 2
        db.dispose()
    finally:
        receiver.stop()


def test_deliver_webhooks_for_every_terminal_status(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker, receiver: WebhookReceiver
) -> None:  # type: ignore[no-untyped-def]
    settings = _settings(database_url, redis_url, receiver)
    db = Database(settings.database_url)
    start_worker(settings, "statuses")
    incomplete = _run(db, redis, settings, input="tokens 50", max_output_tokens=20, background=True)
    failed = accept(db, redis, settings, input="broken", background=True)
    overwrite_row(db, failed, request={"model": MODEL, "input": 42})
    cancelled = accept(db, redis, settings, input="cancelled while queued", background=True)
    redis.set(redis_keys.cancel(cancelled), "1")
    for response_id in (failed, cancelled):
        enqueue(make_celery(settings), settings, response_id, MODEL)
        wait_for_end(redis, response_id)

    receiver.wait_for(3)
    kinds = {type(receiver.of(rid)[0].event) for rid in (incomplete, failed, cancelled)}
    assert kinds == {ResponseIncompleteWebhookEvent, ResponseFailedWebhookEvent, ResponseCancelledWebhookEvent}


def test_send_no_webhook_for_foreground_response(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker, receiver: WebhookReceiver
) -> None:  # type: ignore[no-untyped-def]
    settings = _settings(database_url, redis_url, receiver)
    db = Database(settings.database_url)
    start_worker(settings, "foreground")
    foreground = _run(db, redis, settings, input="not in the background")
    background = _run(db, redis, settings, input="in the background", background=True)

    receiver.wait_for(1)
    time.sleep(0.5)
    assert [d.event.data.id for d in receiver.deliveries] == [background]
    assert db.run(list_deliveries, response_id=foreground) == []
    db.dispose()


def test_worker_sends_again_delivery_whose_task_was_lost(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker, receiver: WebhookReceiver
) -> None:  # type: ignore[no-untyped-def]
    settings = _settings(database_url, redis_url, receiver).model_copy(update={"webhook_resend_after_seconds": 1.0})
    db = Database(settings.database_url)
    lost = WebhookDelivery(event_id("resp_lost", "response.completed"), "response.completed", int(time.time()),
                           "resp_lost", receiver.url)
    db.run(add_pending, log_rows([lost]))  # logged, then the process died before sending its task
    start_worker(settings, "sweeper")

    [delivery] = receiver.wait_for(1)
    assert delivery.error is None and delivery.body.decode() == lost.payload()
    _wait_state(db, "resp_lost", "delivered")
    db.dispose()
