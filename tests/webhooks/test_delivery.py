"""One delivery attempt against endpoints that misbehave, and copies of a delivery that already ended."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from oss_responses.config import Settings, WebhookEndpoint
from oss_responses.storage import Database, cancel_queued, insert_response
from oss_responses.storage.webhook_deliveries import (
    add_pending,
    delivery_state,
    ended_with_deliveries,
    record_attempt,
)
from oss_responses.webhooks.delivery import attempt_delivery, backoff_seconds, post
from oss_responses.webhooks.events import WebhookDelivery
from oss_responses.webhooks.notify import log_rows
from tests.support.rows import new_response
from tests.support.webhook_receiver import WebhookReceiver, new_webhook_secret


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    yield database
    database.dispose()


def _event(url: str) -> WebhookDelivery:
    return WebhookDelivery("evt_copy", "response.completed", 1_764_000_000, "resp_copy", url)


def _endpoint(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A one-connection-at-a-time HTTP endpoint on loopback whose answer is ``answer``'s doing."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                connection.recv(65536)  # the request (headers and the small event)
                try:
                    answer(connection)
                except OSError:  # the client hung up
                    pass

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    stop.set()
    server.close()


def _drip(connection: socket.socket) -> None:
    for byte in b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n":
        connection.sendall(bytes([byte]))
        time.sleep(0.1)


def _huge_error(connection: socket.socket) -> None:
    connection.sendall(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 1000000000\r\n\r\n")
    chunk = b"x" * 65536
    for _ in range(15_000):  # ~1 GB, if it were all read
        connection.sendall(chunk)


@pytest.fixture
def dripping() -> Iterator[str]:
    yield from _endpoint(_drip)


@pytest.fixture
def huge_error() -> Iterator[str]:
    yield from _endpoint(_huge_error)


def test_post_to_endpoint_dripping_its_answer_ends_at_the_timeout(dripping: str) -> None:
    # httpx's timeout bounds each read: a byte every 0.1 s held the task (one of the worker's response
    # threads) for as long as the endpoint liked (the webhooks probe: over 30 s with a 3 s timeout).
    started = time.monotonic()
    attempt = post(WebhookEndpoint(url=dripping, secret=new_webhook_secret()), _event(dripping), timeout=0.5)
    assert time.monotonic() - started < 1.5
    assert attempt.status is None and attempt.error is not None and "no answer within 0.5 s" in attempt.error


def test_post_to_endpoint_answering_a_huge_error_reads_only_its_start(huge_error: str) -> None:
    started = time.monotonic()
    attempt = post(WebhookEndpoint(url=huge_error, secret=new_webhook_secret()), _event(huge_error), timeout=30)
    assert time.monotonic() - started < 5  # not the gigabyte (the probe: the worker held 1.4 GB of it)
    assert attempt.status == 500 and attempt.error == "HTTP 500: " + "x" * 200


@pytest.mark.parametrize("ended", ["delivered", "failed"])
def test_attempt_of_delivery_that_already_ended_posts_nothing(db: Database, ended: str) -> None:
    receiver = WebhookReceiver().start()
    try:
        event = _event(receiver.url)
        settings = Settings(webhook_endpoints=[WebhookEndpoint(url=receiver.url, secret=receiver.secret)])
        db.run(add_pending, log_rows([event]))
        db.run(record_attempt, event.webhook_id, event.url, state=ended, status=200, error=None)

        assert attempt_delivery(settings, db, event) == (ended, 1)
        assert receiver.deliveries == [] and db.run(delivery_state, event.webhook_id, event.url) == (ended, 1)
    finally:
        receiver.stop()


def test_failed_attempt_of_delivered_delivery_leaves_it_delivered(db: Database) -> None:
    # Two copies of one task at once (at least once): the one that failed answers after the one delivered.
    event = _event("https://hooks.example/receive")
    db.run(add_pending, log_rows([event]))
    db.run(record_attempt, event.webhook_id, event.url, state="delivered", status=200, error=None)

    db.run(record_attempt, event.webhook_id, event.url, state="failed", status=500, error="HTTP 500")

    assert db.run(delivery_state, event.webhook_id, event.url) == ("delivered", 1)


def test_backoff_stays_under_half_the_visibility_timeout() -> None:
    # A retry waits unacknowledged in its worker: past the visibility timeout Redis hands it out again.
    settings = Settings(webhook_backoff_seconds=30, visibility_timeout_seconds=100)
    assert [backoff_seconds(settings, n) for n in (1, 2, 3)] == [30, 50, 50]
    assert backoff_seconds(Settings(webhook_backoff_seconds=2.0), 20) == 150  # the defaults: 300 s / 2


def test_end_saved_with_its_deliveries_logs_them_in_its_transaction(db: Database) -> None:
    # Logged after the save, in a transaction of their own, a process dying between the two lost them: the
    # response ended, and no delivery was left for the sweeper (the webhooks probe, from the code).
    record = new_response(status="queued", background=True)
    db.run(insert_response, record, [])
    event = _event("https://hooks.example/receive")
    rows = log_rows([WebhookDelivery(event.webhook_id, "response.cancelled", event.created_at, record.id, event.url)])

    assert db.run(ended_with_deliveries, rows, cancel_queued, record.id, record.response)
    assert db.run(delivery_state, event.webhook_id, event.url) == ("pending", 0)


def test_end_not_saved_logs_no_delivery(db: Database) -> None:
    record = new_response(status="queued", background=True)
    db.run(insert_response, record, [])
    db.run(cancel_queued, record.id, record.response)
    rows = log_rows([_event("https://hooks.example/receive")])

    assert not db.run(ended_with_deliveries, rows, cancel_queued, record.id, record.response)
    assert db.run(delivery_state, "evt_copy", "https://hooks.example/receive") is None
