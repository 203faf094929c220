"""deploy/grafana/oss-responses.json charts the service's metrics, by their exact names (metrics.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from oss_responses import metrics

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "oss-responses.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def defined_series() -> dict[str, str]:
    """Every series name the service exposes → the metric it belongs to."""
    series = {metrics.QUEUE_DEPTH: metrics.QUEUE_DEPTH}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            for family in value.describe():
                for suffix in SUFFIXES[family.type]:
                    series[family.name + suffix] = family.name
    return series


def exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def test_dashboard_exprs_name_only_defined_series() -> None:
    series = defined_series()
    for expr in exprs():
        names = set(re.findall(r"\boss_responses_[a-z_]+", expr))
        assert names, f"no oss_responses metric in {expr!r}"
        assert names <= series.keys(), f"{expr!r} names {names - series.keys()}"


def test_dashboard_charts_every_metric() -> None:
    series = defined_series()
    charted = {series[name] for expr in exprs() for name in re.findall(r"\boss_responses_[a-z_]+", expr)}
    assert charted == set(series.values())
