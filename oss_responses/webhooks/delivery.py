"""One delivery attempt: POST the signed event, log the result, say whether to try again."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Literal

import httpx

from oss_responses.config import Settings, WebhookEndpoint
from oss_responses.metrics import WEBHOOK_DELIVERIES, WEBHOOK_DELIVERY_SECONDS
from oss_responses.storage import Database
from oss_responses.storage.webhook_deliveries import attempts_of, record_attempt
from oss_responses.webhooks.events import WebhookDelivery
from oss_responses.webhooks.signing import signed_headers

log = logging.getLogger(__name__)

State = Literal["delivered", "retrying", "failed"]
MAX_BACKOFF_SECONDS = 3600.0


@dataclass(frozen=True)
class Attempt:
    status: int | None  # the endpoint's HTTP status; None: no answer
    error: str | None  # None: delivered (a 2xx)


def post(endpoint: WebhookEndpoint, delivery: WebhookDelivery, timeout: float) -> Attempt:
    payload = delivery.payload()
    headers = signed_headers(endpoint.secret.get_secret_value(), delivery.webhook_id, payload)
    started = time.perf_counter()
    try:
        answer = httpx.post(endpoint.url, content=payload, headers=headers, timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as exc:
        return Attempt(None, f"{type(exc).__name__}: {exc}"[:500])
    finally:
        WEBHOOK_DELIVERY_SECONDS.observe(time.perf_counter() - started)
    if 200 <= answer.status_code < 300:
        return Attempt(answer.status_code, None)
    return Attempt(answer.status_code, f"HTTP {answer.status_code}: {answer.text[:200]}")


def endpoint_for(settings: Settings, url: str) -> WebhookEndpoint | None:
    return next((endpoint for endpoint in settings.webhook_endpoints if endpoint.url == url), None)


def attempt_delivery(settings: Settings, db: Database, delivery: WebhookDelivery) -> tuple[State, int]:
    """One attempt: POSTed, logged, counted; the delivery's state after it and the attempt's number.

    Attempts are numbered from the log (not Celery's retry count), so a task sent again by the sweeper or
    redelivered by the broker counts on from where the delivery stood.
    """
    attempt_number = db.run(attempts_of, delivery.webhook_id, delivery.url) + 1
    endpoint = endpoint_for(settings, delivery.url)
    if endpoint is None:  # its secret is not known here: nothing can be signed
        attempt = Attempt(None, "no endpoint with this URL in this worker's OSS_RESPONSES_WEBHOOK_ENDPOINTS")
    else:
        attempt = post(endpoint, delivery, settings.webhook_timeout_seconds)
    state: State = "delivered" if attempt.error is None else "retrying"
    if state == "retrying" and (endpoint is None or attempt_number >= settings.webhook_max_attempts):
        state = "failed"
    db.run(record_attempt, delivery.webhook_id, delivery.url, state=state, status=attempt.status, error=attempt.error)
    WEBHOOK_DELIVERIES.labels(delivery.event_type, "given_up" if state == "failed" else state).inc()
    if state != "delivered":
        log.warning("webhook %s to %s, attempt %d: %s (%s)", delivery.webhook_id, delivery.url, attempt_number,
                    attempt.error, state)
    return state, attempt_number


def backoff_seconds(settings: Settings, attempt_number: int) -> float:
    """The wait before the next attempt: ``webhook_backoff_seconds`` doubled at each attempt, capped."""
    return float(min(settings.webhook_backoff_seconds * 2 ** (attempt_number - 1), MAX_BACKOFF_SECONDS))
