"""Webhook events as OpenAI sends them: payloads that ``openai.types.webhooks`` accepts, ids stable across
retries, Standard Webhooks signatures that the openai SDK verifies."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from openai import InvalidWebhookSignatureError, OpenAI
from openai.types.webhooks import UnwrapWebhookEvent
from pydantic import TypeAdapter
from support.webhook_receiver import new_webhook_secret

from oss_responses.config import Settings, WebhookEndpoint
from oss_responses.webhooks.events import EVENT_TYPES, planned_deliveries
from oss_responses.webhooks.signing import signed_headers

SDK = OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")
SECRET = new_webhook_secret()


def _settings(*urls: str) -> Settings:
    return Settings(webhook_endpoints=[WebhookEndpoint(url=url, secret=SECRET) for url in urls])


@pytest.mark.parametrize("status", sorted(EVENT_TYPES))
def test_payload_validates_as_openai_webhook_event(status: str) -> None:
    [delivery] = planned_deliveries(_settings("https://a.example/hook"), "resp_1", status, background=True,
                                    ended_at=1_700_000_000)
    event = TypeAdapter(UnwrapWebhookEvent).validate_python(json.loads(delivery.payload()))
    assert (event.type, event.data.id, event.created_at, event.object) == (
        f"response.{status}", "resp_1", 1_700_000_000, "event")


def test_plan_deliveries_one_per_endpoint_with_one_event_id() -> None:
    deliveries = planned_deliveries(_settings("https://a.example/1", "https://b.example/2"), "resp_2", "completed",
                                    background=True, ended_at=1)
    assert [d.url for d in deliveries] == ["https://a.example/1", "https://b.example/2"]
    assert len({d.webhook_id for d in deliveries}) == 1 and deliveries[0].webhook_id.startswith("evt_")


def test_plan_deliveries_names_event_alike_when_queued_twice() -> None:
    settings = _settings("https://a.example/1")
    first = planned_deliveries(settings, "resp_3", "failed", background=True, ended_at=1)
    again = planned_deliveries(settings, "resp_3", "failed", background=True, ended_at=2)
    assert first[0].webhook_id == again[0].webhook_id


@pytest.mark.parametrize(("status", "background"), [("completed", False), ("in_progress", True), ("queued", True)])
def test_plan_no_deliveries_unless_background_response_ended(status: str, background: bool) -> None:
    assert planned_deliveries(_settings("https://a.example/1"), "resp_4", status, background=background,
                              ended_at=1) == []


def test_signature_verifies_with_openai_sdk() -> None:
    [delivery] = planned_deliveries(_settings("https://a.example/1"), "resp_5", "completed", background=True,
                                    ended_at=1)
    headers = signed_headers(SECRET, delivery.webhook_id, delivery.payload())
    event = SDK.webhooks.unwrap(delivery.payload(), headers, secret=SECRET)
    assert event.type == "response.completed" and event.data.id == "resp_5"


def test_signature_refused_with_other_secret() -> None:
    headers = signed_headers(SECRET, "evt_1", "{}")
    with pytest.raises(InvalidWebhookSignatureError):
        SDK.webhooks.verify_signature("{}", headers, secret=new_webhook_secret())


def test_signature_refused_when_older_than_five_minutes() -> None:
    headers = signed_headers(SECRET, "evt_1", "{}", now=datetime.now(UTC) - timedelta(minutes=6))
    with pytest.raises(InvalidWebhookSignatureError):
        SDK.webhooks.verify_signature("{}", headers, secret=SECRET)
