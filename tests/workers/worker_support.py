"""Helpers of the worker tests: accept a request as the API does, read and follow a response's stream."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis as redis_lib
from sqlalchemy import update

from oss_responses import redis_keys
from oss_responses.api.queued import build_queued
from oss_responses.config import Settings
from oss_responses.eventlog.frames import parse_frame
from oss_responses.eventlog.writer import event_commands
from oss_responses.harmony.lifecycle import opening_events
from oss_responses.requests import parse_create_request
from oss_responses.sealing import build_sealer, seal_secrets
from oss_responses.storage import Database, ResponseRecord, ResponseRow, get_event_log, get_response, insert_response
from oss_responses.wire import wire_json
from oss_responses.statuses import TERMINAL_EVENT_TYPES

REPO = Path(__file__).resolve().parents[2]
MODEL = "gpt-oss-20b"


# The database of the latest worker_settings(): where events_of reads a finished response's archived log.
_archive_database_url: str | None = None


def worker_settings(database_url: str, redis_url: str, **overrides: Any) -> Settings:
    global _archive_database_url
    _archive_database_url = database_url
    fields: dict[str, Any] = {
        "database_url": database_url,
        "redis_url": redis_url,
        "tiktoken_dir": REPO / "var" / "tiktoken",
        "models": [MODEL],
        "worker_model": MODEL,
        "lease_seconds": 3.0,
        "reaper_interval_seconds": 0.5,
    }
    return Settings(**(fields | overrides))


def accept(db: Database, redis: redis_lib.Redis, settings: Settings, **body: Any) -> str:
    """What the API does when it accepts a request (without sending the task); the response id."""
    return accept_with_secrets(db, redis, settings, **body)[0]


def accept_with_secrets(
    db: Database, redis: redis_lib.Redis, settings: Settings, **body: Any
) -> tuple[str, dict[str, dict[str, Any]]]:
    """``accept``; the MCP credentials sealed into the row as the API does (with keys in the settings),
    else returned, for the task to carry as older versions did."""
    queued = build_queued(parse_create_request({"model": MODEL, **body}), settings)
    response = queued.response
    sealer = build_sealer(settings.encryption_key_values)
    sealed = seal_secrets(sealer, queued.secrets) if queued.secrets and sealer is not None else None
    record = ResponseRecord(
        id=response.id, model=response.model, status="queued", background=bool(response.background),
        store=bool(queued.request.get("store", True)), request=queued.request,
        response=wire_json(response), previous_response_id=response.previous_response_id, sealed_secrets=sealed,
    )
    db.run(insert_response, record, queued.input_items)
    with redis.pipeline(transaction=False) as pipe:
        for command in event_commands(response.id, opening_events(response)):
            pipe.execute_command(*command)
        pipe.execute()
    return response.id, {} if sealed else queued.secrets


def overwrite_row(db: Database, response_id: str, **columns: Any) -> None:
    """Write columns of a stored response directly (a row damaged by a bug or by hand)."""
    with db.session() as session:
        session.execute(update(ResponseRow).where(ResponseRow.id == response_id).values(**columns))


def stream_entries(redis: redis_lib.Redis, response_id: str) -> list[tuple[str, dict[bytes, bytes]]]:
    return [(i.decode(), f) for i, f in redis.xrange(redis_keys.events(response_id))]


def events_of(redis: redis_lib.Redis, response_id: str) -> list[dict[str, Any]]:
    """Every event of the response: from its stream, or from SQL once the stream was archived."""
    entries = stream_entries(redis, response_id)
    if entries and b"archived" in entries[-1][1]:
        return [parse_frame(data) for data in archived_frames(response_id)]
    return [parse_frame(fields[b"f"]) for _, fields in entries if b"f" in fields]


def archived_frames(response_id: str) -> list[bytes]:
    assert _archive_database_url is not None, "worker_settings() names the database"
    db = Database(_archive_database_url)
    try:
        event_log = db.run(get_event_log, response_id)
    finally:
        db.dispose()
    assert event_log is not None, f"the event log of {response_id} was archived but is not in SQL"
    return event_log.frames


def is_closed(redis: redis_lib.Redis, response_id: str) -> bool:
    entries = stream_entries(redis, response_id)
    return bool(entries) and b"end" in entries[-1][1]


def _follow(redis: redis_lib.Redis, response_id: str, timeout: float) -> Iterator[dict[bytes, bytes]]:
    """The fields of each stream entry as it arrives (blocking reads), until ``timeout``."""
    deadline = time.monotonic() + timeout
    last = "0-0"
    key = redis_keys.events(response_id)
    while time.monotonic() < deadline:
        for _, entries in redis.xread({key: last}, block=200) or []:
            for entry_id, fields in entries:
                last = entry_id.decode()
                yield fields


def wait_for_end(redis: redis_lib.Redis, response_id: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Follow the stream (blocking reads) until its end marker; every event, in order."""
    for fields in _follow(redis, response_id, timeout):
        if b"end" in fields:
            return events_of(redis, response_id)
    raise TimeoutError(f"the stream of {response_id} did not end within {timeout}s")


def wait_for_event(redis: redis_lib.Redis, response_id: str, event_type: str, timeout: float = 20.0) -> None:
    for fields in _follow(redis, response_id, timeout):
        if b"f" in fields and parse_frame(fields[b"f"])["type"] == event_type:
            return
    raise TimeoutError(f"no {event_type} for {response_id} within {timeout}s")


def assert_contiguous(events: list[dict[str, Any]]) -> None:
    assert [e["sequence_number"] for e in events] == list(range(len(events)))




def story_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def assert_one_story(events: list[dict[str, Any]], db: Database, response_id: str) -> None:
    """Contiguous, one terminal event, deltas on their item's id, and the stream's final object is SQL's."""
    assert_contiguous(events)
    assert [e["type"] for e in events if e["type"] in TERMINAL_EVENT_TYPES] == ["response.completed"]
    added = {e["item"]["id"] for e in events if e["type"] == "response.output_item.added"}
    assert {e["item_id"] for e in events if "delta" in e} <= added
    done = [e["item"]["id"] for e in events if e["type"] == "response.output_item.done"]
    assert sorted(done) == sorted(added)
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "completed"
    assert record.response["output"] == events[-1]["response"]["output"]


START_TIMEOUT_S = 30.0


class WorkerProcess:
    def __init__(self, settings: Settings, name: str, log_dir: Path) -> None:
        env = os.environ | {
            "OSS_RESPONSES_DATABASE_URL": settings.database_url,
            "OSS_RESPONSES_REDIS_URL": settings.redis_url,
            "OSS_RESPONSES_TIKTOKEN_DIR": str(settings.tiktoken_dir),
            "OSS_RESPONSES_WORKER_MODEL": MODEL,
            "OSS_RESPONSES_WORKER_CONCURRENCY": "4",
            "OSS_RESPONSES_LEASE_SECONDS": str(settings.lease_seconds),
            "OSS_RESPONSES_REAPER_INTERVAL_SECONDS": str(settings.reaper_interval_seconds),
            "OSS_RESPONSES_SCRIPTED_TOKENS_PER_SECOND": str(settings.scripted_tokens_per_second),
            "OSS_RESPONSES_TOOL_SERVERS": json.dumps(settings.tool_servers),
            "OSS_RESPONSES_IDEMPOTENT_TOOLS": json.dumps(settings.idempotent_tools),
            "OSS_RESPONSES_WORKER_METRICS_PORT": str(settings.worker_metrics_port),
            "OSS_RESPONSES_WEBHOOK_ENDPOINTS": json.dumps(
                [{"url": e.url, "secret": e.secret.get_secret_value()} for e in settings.webhook_endpoints]
            ),
            "OSS_RESPONSES_WEBHOOK_MAX_ATTEMPTS": str(settings.webhook_max_attempts),
            "OSS_RESPONSES_WEBHOOK_BACKOFF_SECONDS": str(settings.webhook_backoff_seconds),
            "OSS_RESPONSES_WEBHOOK_RESEND_AFTER_SECONDS": str(settings.webhook_resend_after_seconds),
            "OSS_RESPONSES_LOG_FORMAT": settings.log_format,
            "OSS_RESPONSES_LOG_LEVEL": settings.log_level,
        }
        self.log = log_dir / f"{name}.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "oss_responses.workers", "-n", f"{name}@%h", "--loglevel", "INFO"],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            )

    def wait_ready(self, redis: redis_lib.Redis, known: set[bytes]) -> None:
        """Until a new readiness key appears (set once this worker's engine is up)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited {self.process.returncode}: {self.log.read_text()[-2000:]}")
            if set(redis.scan_iter("oss:worker:*:ready")) - known:
                return
            time.sleep(0.05)
        raise TimeoutError(f"worker not ready: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
