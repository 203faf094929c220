"""``GET /metrics`` of the API: Prometheus text with this process's counters and the broker's queue depths."""

from __future__ import annotations

import httpx2
from prometheus_client.parser import text_string_to_metric_families
from support import MODEL


def _samples(http: httpx2.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = http.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def _accepted(samples: dict, model: str) -> float:  # type: ignore[type-arg]
    return samples.get(("oss_responses_accepted_total", (("background", "true"), ("model", model))), 0.0)


def test_read_metrics_counts_accepted_background_response(http: httpx2.Client) -> None:
    before = _accepted(_samples(http), MODEL)
    created = http.post("/v1/responses", json={"model": MODEL, "input": "count me", "background": True})
    assert created.status_code == 200
    assert _accepted(_samples(http), MODEL) == before + 1


def test_read_metrics_reports_queue_depth_per_model(http: httpx2.Client) -> None:
    for _ in range(2):  # no worker runs: the tasks wait in the model's queue
        http.post("/v1/responses", json={"model": MODEL, "input": "wait", "background": True})
    samples = _samples(http)
    assert samples[("oss_responses_queue_depth", (("queue", f"responses.{MODEL}"),))] == 2
    assert samples[("oss_responses_queue_depth", (("queue", "responses.gpt-oss-120b"),))] == 0
    assert samples[("oss_responses_queue_depth", (("queue", "webhooks"),))] == 0
