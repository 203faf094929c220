"""The worker tests' world: settings on the test stores, a request accepted as the API accepts it (row
and opening events, without sending the task), cancelled as the API cancels it, and a stored row
overwritten by hand."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis as redis_lib
from sqlalchemy import delete, update

from oss_responses import redis_keys
from oss_responses.api.queued import build_queued
from oss_responses.config import Settings
from oss_responses.eventlog.writes import close_after, event_commands
from oss_responses.harmony.lifecycle import opening_events
from oss_responses.requests import parse_create_request
from oss_responses.sealing import build_sealer, seal_secrets
from oss_responses.storage import (
    Database,
    EventLogRow,
    OutputItemRow,
    ResponseRecord,
    ResponseRow,
    cancel_queued,
    get_response,
    insert_response,
)
from oss_responses.wire import wire_json
from oss_responses.workers.testing import local_worker, run_response_now
from support import MODEL, TIKTOKEN_DIR
from support.processes import WorkerProcess
from support.servers import RedisServer, start_redis
from support.streams import read_archives_from, wait_for_event


def worker_settings(database_url: str, redis_url: str, **overrides: Any) -> Settings:
    """Settings of a worker on these stores. The lease outlasts any stall two cores shared by three test
    processes cause (at 3 s, a response of a test about something else ended as ``lease_lost`` in CI);
    the tests of takeovers set their own short one, which the quick reaper then notices soon."""
    read_archives_from(database_url)
    fields: dict[str, Any] = {
        "database_url": database_url,
        "redis_url": redis_url,
        "tiktoken_dir": TIKTOKEN_DIR,
        "models": [MODEL],
        "worker_model": MODEL,
        "lease_seconds": 60.0,
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


def cancel(db: Database, redis: redis_lib.Redis, settings: Settings, response_id: str) -> None:
    """What the API does to cancel (``api/jobs.request_cancel``): the flag, the open-streams entry and the
    announcement, then the queued -> cancelled compare-and-set, whose winner ends the stream. A store that
    does not answer raises, where the API would answer 503."""
    with redis.pipeline(transaction=False) as pipe:
        pipe.set(redis_keys.cancel(response_id), "1", ex=settings.event_ttl_seconds)
        pipe.sadd(redis_keys.OPEN_STREAMS, response_id)
        pipe.publish(redis_keys.CANCEL_CHANNEL, response_id)
        pipe.execute()
    record = db.run(get_response, response_id)
    if record is not None and db.run(cancel_queued, response_id, record.response):
        close_after(redis, response_id, [], "cancelled", settings.event_ttl_seconds)


def overwrite_row(db: Database, response_id: str, **columns: Any) -> None:
    """Write columns of a stored response directly (a row damaged by a bug or by hand)."""
    with db.session() as session:
        session.execute(update(ResponseRow).where(ResponseRow.id == response_id).values(**columns))


def roll_back_row(db: Database, earlier: ResponseRecord) -> None:
    """The response's row as it was in ``earlier`` and its end's rows gone: the database restored to a
    point before the response ended (a backup, a lagging replica), Redis not."""
    overwrite_row(db, earlier.id, status=earlier.status, response=earlier.response, error=None,
                  output_messages=earlier.output_messages, input_messages=earlier.input_messages, completed_at=None)
    with db.session() as session:
        session.execute(delete(EventLogRow).where(EventLogRow.response_id == earlier.id))
        session.execute(delete(OutputItemRow).where(OutputItemRow.response_id == earlier.id))


@dataclass(frozen=True)
class Generating:
    settings: Settings
    db: Database  # the caller disposes of it
    response_id: str
    running: Future[str]  # the run's outcome


@contextmanager
def generating(database_url: str, redis_url: str, redis: redis_lib.Redis, tokens: int) -> Iterator[Generating]:
    """A background response of ``tokens`` tokens running on a local worker at 50 tokens/s, its first text
    delta written; the worker stops when the block ends."""
    settings = worker_settings(database_url, redis_url, scripted_tokens_per_second=50.0)
    db = Database(settings.database_url)
    response_id = accept(db, redis, settings, input=f"tokens {tokens}", background=True)
    with local_worker(settings) as worker, ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_response_now, response_id, worker=worker)
        wait_for_event(redis, response_id, "response.output_text.delta")
        yield Generating(settings, db, response_id, running)


@dataclass
class OwnRedisWorker:
    server: RedisServer
    settings: Settings
    redis: redis_lib.Redis
    db: Database
    worker: WorkerProcess


@contextmanager
def worker_on_own_redis(database_url: str, log_dir: Path, name: str, **overrides: Any) -> Iterator[OwnRedisWorker]:
    """A ready worker process (``overrides``: its settings) on a redis-server with AOF of its own, which the
    test kills, restarts or freezes; all of it stopped when the block ends."""
    server = start_redis(appendonly=True)
    settings = worker_settings(database_url, server.url, **overrides)
    client = redis_lib.Redis.from_url(server.url)
    db = Database(settings.database_url)
    worker = None
    try:
        worker = WorkerProcess(settings, name, log_dir)
        worker.wait_ready(client, set())
        yield OwnRedisWorker(server, settings, client, db, worker)
    finally:
        if worker is not None:
            worker.stop()
        db.dispose()
        client.close()
        server.stop()
