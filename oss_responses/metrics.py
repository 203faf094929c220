"""Every Prometheus metric of the service, in one place (names ``oss_responses_*``).

The API serves them on ``/metrics`` (``api/metrics.py``: with ``PROMETHEUS_MULTIPROC_DIR`` set, the sum
over every API process), each worker on its own port (``worker_metrics_port``, ``workers/metrics.py``).
``deploy/grafana/oss-responses.json`` charts them; a test checks that every panel names a metric defined
here.

Nothing here is called per token: tokens are counted once per engine call, event writes once per flush
(one flush carries every running response's events of one engine step).

Defining the metric objects at import builds no settings and opens nothing; in multiprocess mode
prometheus_client reads ``PROMETHEUS_MULTIPROC_DIR`` when it is first imported, so that variable must be
in the process's environment from its start.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# --- API ----------------------------------------------------------------------
ACCEPTED = Counter(
    "oss_responses_accepted_total", "Responses accepted by the API (stored and queued)", ["model", "background"]
)
ACTIVE_STREAMS = Gauge(
    "oss_responses_active_streams", "SSE streams the API is relaying right now", multiprocess_mode="livesum"
)
# Read from the broker at scrape time (api/metrics.py: QueueDepthCollector); declared here for the name.
QUEUE_DEPTH = "oss_responses_queue_depth"

# --- responses (wherever they end: worker, reaper, API cancel) ------------------
RESPONSES_ENDED = Counter(
    "oss_responses_responses_ended_total", "Responses that reached a terminal status, by status", ["model", "status"]
)
TASK_OUTCOMES = Counter(
    "oss_responses_worker_tasks_total",
    "run_response tasks by outcome (completed, failed, ..., skipped, leased_elsewhere, running_here, lease_lost, "
    "handed_off, engine_lost)",
    ["model", "outcome"],
)
TIME_TO_FIRST_TOKEN = Histogram(
    "oss_responses_time_to_first_token_seconds",
    "From the response's creation (accepted by the API) to its first generated token",
    ["model"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
OUTPUT_TOKENS = Counter(
    "oss_responses_output_tokens_total", "Tokens generated, counted as each engine call ends", ["model"]
)

# --- worker internals -----------------------------------------------------------
EVENT_WRITE_SECONDS = Histogram(
    "oss_responses_event_write_seconds",
    "One EventWriter flush (every running response's buffered events and journal steps, one round trip)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
)
EVENT_WRITE_FAILURES = Counter("oss_responses_event_write_failures_total", "EventWriter flushes that failed")
MCP_CALL_SECONDS = Histogram(
    "oss_responses_mcp_call_seconds",
    "MCP tool calls, by server (a configured label, or a request's allow-list prefix)", ["server"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
MCP_CALL_ERRORS = Counter(
    "oss_responses_mcp_call_errors_total", "MCP tool calls that failed (timeout, unreachable, refused, tool error)",
    ["server"],
)
LEASE_LOSSES = Counter(
    "oss_responses_lease_losses_total",
    "Responses this worker stopped and left to a takeover: their lease was lost, or their event log unreachable",
)
TAKEOVERS = Counter(
    "oss_responses_takeovers_total", "Responses taken over from a lost worker (or after a handoff)", ["kind"]
)
REAPER_ACTIONS = Counter(
    "oss_responses_reaper_actions_total",
    "Reaper and sweeper actions: takeover dispatched, lost response failed, stale queued task sent again",
    ["action"],
)

# --- webhooks -----------------------------------------------------------------------
WEBHOOK_DELIVERIES = Counter(
    "oss_responses_webhook_deliveries_total",
    "Webhook delivery attempts by result (delivered, retrying, given_up)",
    ["event_type", "result"],
)
WEBHOOK_DELIVERY_SECONDS = Histogram(
    "oss_responses_webhook_delivery_seconds", "One webhook POST, from send to answer",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)


def response_ended(model: str, status: str) -> None:
    RESPONSES_ENDED.labels(model, status).inc()
