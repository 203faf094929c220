"""The worker's context: what ``start_worker`` builds for the task threads to share."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis as redis_lib
import uvloop
from redis.exceptions import ConnectionError as RedisConnectionError
from support.db_connections import connects_in_two_rounds
from support.servers import RedisServer
from support.silent_link import SilentLink
from support.streams import wait_for_event
from support.workers import accept, worker_settings

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.outage_log import OutageLog
from oss_responses.storage import Database
from oss_responses.workers.context import READY_TTL_SECONDS, WorkerContext, start_worker
from oss_responses.workers.testing import local_worker, run_response_now


def test_worker_starts_with_its_database_pool_open(worker: WorkerContext, settings: Settings) -> None:
    assert connects_in_two_rounds(worker.db, settings.database_pool_size) == 0


def test_worker_announces_its_model_context_while_up(settings: Settings, redis: redis_lib.Redis) -> None:
    with local_worker(settings.model_copy(update={"scripted_context_tokens": 800})) as ctx:
        assert redis.get(redis_keys.model_context(ctx.settings.worker_model)) == b"800"
        assert 0 < redis.ttl(redis_keys.model_context(ctx.settings.worker_model)) <= READY_TTL_SECONDS


def test_worker_whose_engine_has_no_context_announces_none(worker: WorkerContext, redis: redis_lib.Redis) -> None:
    assert redis.exists(redis_keys.worker_ready(worker.worker_id))
    assert not redis.exists(redis_keys.model_context(worker.settings.worker_model))


def test_worker_announces_its_clock_skew_from_redis(worker: WorkerContext, redis: redis_lib.Redis) -> None:
    # The doctor tells of a worker host whose clock is off (what it stamps and signs, others compare).
    announced = json.loads(redis.get(redis_keys.worker_ready(worker.worker_id)) or b"{}")
    assert abs(announced["clock_skew"]) < 1  # this host's own clock, Redis here


def test_keep_ready_warns_once_when_host_clock_is_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from oss_responses.workers import context

    skews = [0.1, 600.0, 600.2, 599.9, 0.2]
    done = asyncio.Event()

    async def announce(_client: object, _announced: dict[str, str]) -> float:
        if not skews:
            done.set()
            return 0.0
        return skews.pop(0)

    monkeypatch.setattr(context, "_announce", announce)
    monkeypatch.setattr(context, "READY_REFRESH_SECONDS", 0.001)

    async def scenario() -> None:
        task = asyncio.create_task(context._keep_ready(None, {}, OutageLog(logging.getLogger("test"), "Redis")))  # type: ignore[arg-type]
        await done.wait()
        task.cancel()

    with caplog.at_level("WARNING", logger=context.__name__):
        asyncio.run(scenario())
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("this host's clock is +600.0 s from Redis's") and "NTP" in lines[0]
    assert "again" in lines[1]


@pytest.mark.parametrize("error", [RedisConnectionError("Connection refused"), RuntimeError("unexpected")])
def test_keep_ready_goes_on_announcing_after_a_failed_refresh(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """A worker that lived through a Redis restart stayed unready for good: the refresh task had died with
    the first failed refresh (and still did for an error that was not Redis's: the children probe)."""
    from oss_responses.workers import context

    calls: list[int] = []

    async def announce(_client: object, _announced: dict[str, str]) -> float:
        calls.append(len(calls))
        if len(calls) == 1:
            raise error
        return 0.0

    monkeypatch.setattr(context, "_announce", announce)
    monkeypatch.setattr(context, "READY_REFRESH_SECONDS", 0.01)

    async def scenario() -> None:
        task = asyncio.create_task(context._keep_ready(None, {}, OutageLog(logging.getLogger("test"), "Redis")))  # type: ignore[arg-type]
        while len(calls) < 3 and not task.done():
            await asyncio.sleep(0.01)
        assert not task.done()
        task.cancel()

    asyncio.run(scenario())
    assert len(calls) >= 3


def test_keep_ready_tells_redis_away_as_the_worker_outage(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A Redis away for minutes had added a line of its own every 10 s ("announcing this worker's readiness
    # failed") beside the worker's outage lines.
    from oss_responses.workers import context

    failures = [RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")] * 3
    done = asyncio.Event()

    async def announce(_client: object, _announced: dict[str, str]) -> float:
        if failures:
            raise failures.pop()
        done.set()
        return 0.0

    monkeypatch.setattr(context, "_announce", announce)
    monkeypatch.setattr(context, "READY_REFRESH_SECONDS", 0.001)
    redis_outage = OutageLog(logging.getLogger("outage"), "worker: Redis")

    async def scenario() -> None:
        task = asyncio.create_task(context._keep_ready(None, {}, redis_outage))  # type: ignore[arg-type]
        await done.wait()
        task.cancel()

    with caplog.at_level("WARNING"):
        asyncio.run(scenario())
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("worker: Redis unreachable (ConnectionError: Error 111")
    assert lines[1].startswith("worker: Redis answers again after") and "3 failed tries" in lines[1]
    assert not redis_outage.ongoing


def test_worker_redis_command_on_connection_reset_is_sent_again(silent_link: SilentLink) -> None:
    # On uvloop (the engine loop's), a write to a pooled connection the network had reset raised
    # RuntimeError ("the handler is closed"), which redis-py neither reconnects nor retries on: a lease's
    # release after a reset raised out of its task, and an outage before a response started would have
    # failed the response (the network probe's reset of a worker's Redis link).
    from oss_responses.workers import context

    async def scenario() -> bytes | None:
        client = await context._async_redis(f"redis://127.0.0.1:{silent_link.port}/0", 4)
        try:
            await client.set("reset-under", "v")
            silent_link.reset()
            await asyncio.sleep(0.2)  # the RST reaches the pooled connection's transport
            return await client.get("reset-under")  # raised RuntimeError
        finally:
            await client.aclose()

    assert uvloop.run(scenario()) == b"v"


def _stop_warnings(caplog: pytest.LogCaptureFixture, ctx: WorkerContext) -> tuple[float, list[logging.LogRecord]]:
    """``ctx`` stopped: how long it took, and the records at WARNING and above it logged meanwhile."""
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        started = time.monotonic()
        ctx.stop()
        took = time.monotonic() - started
    return took, [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_stop_worker_with_redis_killed_warns_one_line_without_traceback(
    database_url: str, own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The DEL of its readiness key failed with a traceback (a connection refused is an outage, not a bug).
    ctx = start_worker(worker_settings(database_url, own_redis.url), with_reaper=False)
    own_redis.kill()
    took, warnings = _stop_warnings(caplog, ctx)
    assert took < 5
    assert [record.getMessage() for record in warnings if record.exc_info] == []  # no traceback
    unannounced = [r.getMessage() for r in warnings if "readiness key" in r.getMessage()]
    assert len(unannounced) == 1 and "lapses with its TTL" in unannounced[0], warnings
    assert not ctx.loop.running  # the engine loop (and the engine on it) stopped


def test_stop_worker_with_redis_silent_ends_within_bound(
    database_url: str, own_redis: RedisServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Redis that accepts the DEL and never answers (stopped; a blackholed link): the DEL waited out the
    # stop's whole 30 s, which then raised, and the engine was never shut down.
    from oss_responses.workers import context

    monkeypatch.setattr(context, "STOP_REDIS_SECONDS", 0.5, raising=False)
    ctx = start_worker(worker_settings(database_url, own_redis.url), with_reaper=False)
    own_redis.process.send_signal(signal.SIGSTOP)
    shutdowns = []
    real_shutdown = ctx.engine.shutdown

    async def shutdown() -> None:
        shutdowns.append(True)
        await real_shutdown()

    monkeypatch.setattr(ctx.engine, "shutdown", shutdown)
    run = ctx.loop.run
    monkeypatch.setattr(ctx.loop, "run", lambda coro, timeout=None: run(coro, timeout and 5))  # the stop's 30 s
    took, warnings = _stop_warnings(caplog, ctx)
    assert took < 3 and shutdowns == [True]
    messages = [record.getMessage() for record in warnings]
    assert any("readiness key" in m and "no answer within 0.5 s" in m for m in messages), messages
    assert [record.getMessage() for record in warnings if record.exc_info] == []


def _await_line(caplog: pytest.LogCaptureFixture, part: str, timeout: float) -> None:
    """Until a line holding ``part`` was logged, or ``timeout`` passed (the caller's checks then say what lacks)."""
    deadline = time.monotonic() + timeout
    while not any(part in record.getMessage() for record in caplog.records) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_tell_redis_killed_under_running_responses_as_one_outage(
    database_url: str, own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Killed under two streaming responses and started again, Redis cost the worker four ERROR lines (the event
    # writer's flush or connect, then each response's write) and a line per try of its cancel listener's
    # re-subscription, each loop telling it on its own. One outage: a start and an end, and an INFO line per
    # response (the reaper's dispatch of its takeover is its WARNING: tests/workers/test_broker_log.py).
    settings = worker_settings(database_url, own_redis.url, scripted_tokens_per_second=40.0)
    client = redis_lib.Redis.from_url(own_redis.url)
    db = Database(settings.database_url)
    response_ids = [accept(db, client, settings, input="tokens 2000", background=True) for _ in range(2)]
    caplog.set_level(logging.WARNING)
    caplog.set_level(logging.INFO, logger="oss_responses.workers.runner")
    try:
        with local_worker(settings) as ctx, ThreadPoolExecutor(2) as pool:
            runs = [pool.submit(run_response_now, response_id, worker=ctx) for response_id in response_ids]
            for response_id in response_ids:
                wait_for_event(client, response_id, "response.output_text.delta")
            caplog.clear()
            own_redis.kill()
            assert [run.result(timeout=30) for run in runs] == ["lease_lost", "lease_lost"]
            time.sleep(2)  # the cancel listener's tries meet it away
            own_redis.restart()
            _await_line(caplog, "Redis answers again", timeout=10)
    finally:
        client.close()
        db.dispose()
    lines = [record.getMessage() for record in caplog.records]
    assert [record for record in caplog.records if record.levelno >= logging.ERROR or record.exc_info] == []
    assert len([line for line in lines if line.startswith("Redis unreachable")]) == 1, lines
    left = [record.levelname for record in caplog.records
            if "is unreachable: leaving it to a takeover" in record.getMessage()]
    assert left == ["INFO", "INFO"], lines
    assert len([line for line in lines if line.startswith("Redis answers again")]) == 1, lines
