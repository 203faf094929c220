"""One delivery attempt: POST the signed event, log the result, say whether to try again."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Literal, cast

import httpx

from oss_responses.config import Settings, WebhookEndpoint
from oss_responses.logs import safe_url
from oss_responses.metrics import WEBHOOK_DELIVERIES, WEBHOOK_DELIVERY_SECONDS
from oss_responses.storage import Database
from oss_responses.storage.webhook_deliveries import ENDED_STATES, delivery_state, record_attempt
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
    """POST the signed event; the endpoint has ``timeout`` seconds in all to answer.

    httpx's own timeout bounds each read, not the request: a receiver dripping its answer a byte at a time
    held the task's thread, one of those that run responses, for as long as it liked. Of the answer only
    the status and the start of its body are read (a huge body would be held whole in the worker)."""
    payload = delivery.payload()
    headers = signed_headers(endpoint.secret.get_secret_value(), delivery.webhook_id, payload)
    started = time.perf_counter()
    try:
        return asyncio.run(_post(endpoint.url, payload, headers, timeout))
    finally:
        WEBHOOK_DELIVERY_SECONDS.observe(time.perf_counter() - started)


async def _post(url: str, payload: str, headers: dict[str, str], timeout: float) -> Attempt:
    # The URL's userinfo goes as Basic credentials, not in the URL: httpx logs each request's URL whole.
    parts = httpx.URL(url)
    auth = httpx.BasicAuth(parts.username, parts.password or "") if parts.userinfo else None
    try:
        async with asyncio.timeout(timeout), httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            async with client.stream("POST", safe_url(url), content=payload, headers=headers, auth=auth) as answer:
                if 200 <= answer.status_code < 300:
                    return Attempt(answer.status_code, None)
                head = await _head(answer)
    except TimeoutError:
        return Attempt(None, f"no answer within {timeout:g} s (OSS_RESPONSES_WEBHOOK_TIMEOUT_SECONDS)")
    except httpx.HTTPError as exc:
        return Attempt(None, f"{type(exc).__name__}: {exc}"[:500])
    return Attempt(answer.status_code, f"HTTP {answer.status_code}: {head.decode(errors='replace')[:200]}")


async def _head(answer: httpx.Response, size: int = 1024) -> bytes:
    """The first ``size`` bytes of the answer's body (the rest is not read)."""
    head = b""
    async for chunk in answer.aiter_bytes():
        head += chunk
        if len(head) >= size:
            break
    return head[:size]


def endpoint_for(settings: Settings, url: str) -> WebhookEndpoint | None:
    return next((endpoint for endpoint in settings.webhook_endpoints if endpoint.url == url), None)


def attempt_delivery(settings: Settings, db: Database, delivery: WebhookDelivery) -> tuple[State, int]:
    """One attempt: POSTed, logged, counted; the delivery's state after it and the attempt's number.

    Attempts are numbered from the log (not Celery's retry count), so a task sent again by the sweeper or
    redelivered by the broker counts on from where the delivery stood.
    """
    logged = db.run(delivery_state, delivery.webhook_id, delivery.url)
    if logged is not None and logged[0] in ENDED_STATES:
        # A copy of an ended delivery (redelivered by the broker, or resent while its first was slow): sent
        # again, it would reopen a delivery the log and the receiver saw end.
        log.info("webhook %s to %s is already %s: this copy is dropped", delivery.webhook_id,
                 safe_url(delivery.url), logged[0])
        return cast(State, logged[0]), logged[1]
    attempt_number = (logged[1] if logged is not None else 0) + 1
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
        log.warning("webhook %s to %s, attempt %d: %s (%s)", delivery.webhook_id, safe_url(delivery.url),
                    attempt_number, attempt.error, state)
    return state, attempt_number


def longest_backoff(settings: Settings) -> float:
    """A retry waits in its worker, unacknowledged: past the broker's visibility timeout Redis hands it out
    again, and both copies went on retrying (each long wait doubled the attempts). Half of it, at most an hour."""
    return min(MAX_BACKOFF_SECONDS, settings.visibility_timeout_seconds / 2)


def backoff_seconds(settings: Settings, attempt_number: int) -> float:
    """The wait before the next attempt: ``webhook_backoff_seconds`` doubled at each attempt, capped."""
    return float(min(settings.webhook_backoff_seconds * 2 ** (attempt_number - 1), longest_backoff(settings)))
