"""Everything one worker process holds, built once at worker start (never at import time).

:func:`start_worker` brings up, in order: the engine loop thread, the harmony encoding, the engine
(``engine.start()`` on the loop: a failure raises with its reason), the Redis clients, the event
writer, the cancel listener, then the readiness key (set only now that the engine is up, refreshed
while the worker lives) and the reaper thread. :meth:`WorkerContext.stop` undoes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import redis
import redis.asyncio as redis_asyncio
from openai_harmony import HarmonyEncoding
from redis import Redis as SyncRedis  # the field named redis hides the module in the class body
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from oss_responses import redis_keys
from oss_responses.clocks import SKEW_WARN_SECONDS, redis_skew, skewed
from oss_responses.config import Settings
from oss_responses.engine.base import ContextLimited, Engine, EngineDead
from oss_responses.engine.frontends import Frontend
from oss_responses.eventlog.writer import EventWriter
from oss_responses.outage_log import OutageLog, StoreOutages
from oss_responses.prompt_tokenizer import PromptTokenizer
from oss_responses.redis_pool import driver_info, reset_is_lost_connection, silent_peer_guards
from oss_responses.sealing import Sealer, build_sealer
from oss_responses.stopping import cancel_and_wait
from oss_responses.storage import Database
from oss_responses.storage.migrations import newest_revision
from oss_responses.tools.mcp_client import McpSessionPool
from oss_responses.vocab import load_encoding
from oss_responses.webhooks.notify import SendDelivery, WebhookNotifier
from oss_responses.workers.cancel import CancelListener
from oss_responses.workers.engine_loop import EngineLoop
from oss_responses.workers.lease import UnreleasedLeases
from oss_responses.workers.outage import outage, unreachable, wait_for_database, wait_for_redis
from oss_responses.workers.reaper import Reaper

log = logging.getLogger(__name__)
outage_log = logging.getLogger("oss_responses.workers.outage")

READY_TTL_SECONDS = 30
READY_REFRESH_SECONDS = 10
# How long a stopping worker waits for its task threads (their responses handed off, which takes
# about a second) before it stops the engine under them; within compose's 30 s grace period.
TASKS_STOP_TIMEOUT_SECONDS = 20.0
# How long a stopping worker tries to delete its readiness key: with Redis down, the client's reconnects
# and retries (RECONNECT) took about a second; with Redis silent (stopped, a blackholed link) the DEL had
# no bound but the stop's 30 s, past which the engine was never shut down. The key lapses with its TTL.
STOP_REDIS_SECONDS = 3.0


# (response id, model, MCP secrets) → the response's task sent to its model's queue.
Dispatch = Callable[[str, str, "dict[str, Any] | None"], None]


class EngineStartError(RuntimeError):
    """The engine could not be brought up; the worker must not serve."""


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def build_engine(settings: Settings, encoding: HarmonyEncoding, frontend: Frontend | None = None) -> Engine:
    """The settings' engine; ``frontend``: a vLLM client of an engine core the supervisor started."""
    if settings.engine == "scripted":
        from oss_responses.engine.scripted import ScriptedEngine

        return ScriptedEngine.from_settings(settings, encoding)
    from oss_responses.engine.vllm import VllmEngine  # imports vLLM: only on vLLM workers

    return VllmEngine(settings, encoding, frontend)


@dataclass
class WorkerContext:
    settings: Settings
    worker_id: str
    loop: EngineLoop
    encoding: HarmonyEncoding
    tokenizer: PromptTokenizer  # prompts are tokenised through it, never on the engine loop
    engine: Engine
    db: Database
    redis: redis_asyncio.Redis  # used on the engine loop only
    sync_redis: SyncRedis  # task threads and the reaper
    writer: EventWriter
    cancels: CancelListener
    mcp_pool: McpSessionPool | None
    sealer: Sealer | None = None  # None: no encryption keys configured
    reaper: Reaper | None = None
    # Sends a response's task to its model's queue again (response id, model, MCP secrets): how a
    # handoff and a takeover reach another worker. None: nothing to send it with (in-process tests).
    dispatch: Dispatch | None = None
    # Queues the webhooks of the responses this worker ends; None: no sender (in-process tests).
    webhooks: WebhookNotifier | None = None
    # The running responses' "hand off" callbacks (called on the engine loop), by response id.
    running: dict[str, Callable[[], None]] = field(default_factory=dict)
    shutting_down: bool = False
    # Why the engine stopped for good (lose_engine), once it has.
    engine_lost: EngineDead | None = None
    # Asks the worker process to stop and exit non-zero (set by the Celery bootstep); None: in-process tests.
    request_exit: Callable[[], None] | None = None
    # The database's and Redis's outages, told once by every loop of this worker that retries them.
    outages: StoreOutages = field(default_factory=lambda: StoreOutages(outage_log))
    # The leases its runs could not release in an outage: the reaper releases them once Redis answers.
    unreleased: UnreleasedLeases = field(default_factory=UnreleasedLeases)
    _ready_task: asyncio.Task[None] | None = field(default=None, repr=False)
    _tasks: int = field(default=0, repr=False)
    _tasks_changed: threading.Condition = field(default_factory=threading.Condition, repr=False)

    @cached_property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The tokens that end an assistant turn: asked once, as harmony builds them anew per call (~70 us)."""
        return tuple(self.encoding.stop_tokens_for_assistant_actions())

    @contextmanager
    def task(self) -> Iterator[None]:
        """Counts a task thread as running until it leaves: :meth:`stop` waits for it."""
        with self._tasks_changed:
            self._tasks += 1
        try:
            yield
        finally:
            with self._tasks_changed:
                self._tasks -= 1
                self._tasks_changed.notify_all()

    def wait_for_tasks(self, timeout: float) -> int:
        """Waits until no task thread runs (at most ``timeout`` seconds); how many still do."""
        with self._tasks_changed:
            self._tasks_changed.wait_for(lambda: self._tasks == 0, timeout)
            return self._tasks

    def hand_off_all(self) -> int:
        """Shutting down: every running response stops generating and goes to another worker; how many."""
        self.shutting_down = True
        callbacks = list(self.running.values())
        if callbacks and self.loop.running:
            self.loop.run(_call_all(callbacks))
        return len(callbacks)

    def lose_engine(self, error: EngineDead) -> None:
        """The engine died (every running response meets the error, and hands itself on): from now on every
        task goes back to the queue untouched, and the worker stops, for its supervisor to start a new
        engine. Called from task threads; the first call acts."""
        with self._tasks_changed:
            if self.engine_lost is not None:
                return
            self.engine_lost = error
        log.error("the engine stopped for good (%s): its responses go on with other workers, and this worker "
                  "stops so that its supervisor starts it again", error)
        self.shutting_down = True
        if self.request_exit is not None:
            self.request_exit()

    def stop(self, tasks_timeout: float = TASKS_STOP_TIMEOUT_SECONDS) -> None:
        """Hands off what still runs, waits for the task threads, then stops everything under them.

        Celery stops this (a worker bootstep) before its pool, while task threads still run: stopped
        under them, the engine loop would fail their last steps (releasing a lease, writing a
        handoff) and could leave one waiting forever. A run whose prompt the tokenizer's child held, killed
        here first, is handed off (``runner``)."""
        if not self.shutting_down:
            self.hand_off_all()
        # Every run is handed off now, so what the tokenizer's child would tokenise is not used: it is killed
        # at once. Stopped (hung), it held the task threads waiting on it, and the stop, for the whole wait.
        self.tokenizer.close_child()
        left = self.wait_for_tasks(tasks_timeout)
        if left:
            log.warning("stopping the worker with %d task threads still running", left)
        if self.reaper is not None:
            self.reaper.stop()
        if self.loop.running:
            self.loop.run(self._stop_on_loop(), timeout=30)
        self.loop.stop()
        self.tokenizer.close()
        self.sync_redis.close()
        self.db.dispose()

    async def _stop_on_loop(self) -> None:
        await cancel_and_wait(self._ready_task)  # its last SET lands before the DEL
        await self._unannounce()
        await self.cancels.stop()
        if self.mcp_pool is not None:
            await self.mcp_pool.close()
        await self.engine.shutdown()
        await self.writer.aclose()
        await self.redis.aclose()

    async def _unannounce(self) -> None:
        """The readiness key deleted, at most ``STOP_REDIS_SECONDS``: a stop while Redis is down (or silent)
        still shuts the engine down, and the key lapses with its TTL. An outage is a line; anything else
        keeps its traceback."""
        key = redis_keys.worker_ready(self.worker_id)
        try:
            await asyncio.wait_for(self.redis.delete(key), STOP_REDIS_SECONDS)
        except (RedisError, TimeoutError) as exc:
            timed_out = isinstance(exc, TimeoutError)  # asyncio's; redis-py's own is a RedisError
            reason = f"no answer within {STOP_REDIS_SECONDS} s" if timed_out else f"{type(exc).__name__}: {exc}"
            log.warning("stopping: could not delete this worker's readiness key %s (%s); it lapses with its TTL "
                        "(%d s at most)", key, reason, READY_TTL_SECONDS,
                        exc_info=not (timed_out or unreachable(exc)))


async def _call_all(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        callback()


async def _keep_ready(
    redis_client: redis_asyncio.Redis, announced: dict[str, dict[str, Any] | str], redis_outage: OutageLog
) -> None:
    """Until cancelled, whatever Redis does: a failed refresh had ended the task, and a worker that lived
    through a Redis restart was then never ready again (doctor: "no worker ready" while it served). Redis
    away is told with the worker's other loops' tries (``redis_outage``), not a line each 10 s of its own."""
    skew = 0.0
    while True:
        try:
            was, skew = skew, await _announce(redis_client, announced)
            redis_outage.answered()
            _warn_of_skew(skew, was)
        except Exception as exc:  # anything: a worker that serves on unannounced is unready to doctor and the sweep
            if outage(exc):
                redis_outage.failed(exc)
            else:
                log.warning("announcing this worker's readiness failed (%s: %s); trying again in %s s",
                            type(exc).__name__, exc, READY_REFRESH_SECONDS, exc_info=not isinstance(exc, RedisError))
        await asyncio.sleep(READY_REFRESH_SECONDS)


async def _announce(redis_client: redis_asyncio.Redis, announced: dict[str, dict[str, Any] | str]) -> float:
    """Each entry set with its TTL; a dict (the readiness) as JSON, with this host's clock skew measured
    now, which is returned."""
    skew = await redis_skew(redis_client)
    async with redis_client.pipeline(transaction=False) as pipe:
        for key, value in announced.items():
            pipe.set(key, json.dumps({**value, "clock_skew": skew}) if isinstance(value, dict) else value,
                     ex=READY_TTL_SECONDS)
        await pipe.execute()
    return skew


def _warn_of_skew(skew: float, was: float) -> None:
    """A line when this host's clock goes off (and one when it comes back), not at every refresh."""
    if skewed(skew) and not skewed(was):
        log.warning("this host's clock is %+.1f s from Redis's (over %.0f s): the webhooks this worker signs are "
                    "refused by receivers beyond 5 minutes, and its timestamps disagree with other hosts'; run NTP",
                    skew, SKEW_WARN_SECONDS)
    elif skewed(was) and not skewed(skew):
        log.warning("this host's clock is within %.0f s of Redis's again", SKEW_WARN_SECONDS)


def _announced(ctx: WorkerContext) -> dict[str, dict[str, Any] | str]:
    """What a worker keeps set in Redis while its engine is up: its readiness and, when its engine has
    one, its model's context (the API's token count cuts by it; a model's workers share their engine
    settings, so any one of them tells it)."""
    # "schema": the doctor tells an operator of workers an upgrade left on an older release.
    # "clock_skew" (added at each refresh): the doctor tells of a host whose clock is off (clocks.py).
    ready = {"model": ctx.settings.worker_model, "engine": ctx.settings.engine, "pid": os.getpid(),
             "schema": newest_revision()}
    announced: dict[str, dict[str, Any] | str] = {redis_keys.worker_ready(ctx.worker_id): ready}
    context = ctx.engine.context_tokens if isinstance(ctx.engine, ContextLimited) else None
    if context is not None:
        announced[redis_keys.model_context(ctx.settings.worker_model)] = str(context)
    return announced


async def _start_on_loop(ctx: WorkerContext) -> None:
    try:
        await ctx.engine.start()
    except Exception as exc:
        raise EngineStartError(f"the {ctx.settings.engine} engine failed to start: {exc!r}") from exc
    await ctx.cancels.start()
    announced = _announced(ctx)
    await _announce(ctx.redis, announced)
    ctx._ready_task = asyncio.get_running_loop().create_task(_keep_ready(ctx.redis, announced, ctx.outages.redis))


def start_worker(
    settings: Settings,
    *,
    engine: Engine | None = None,
    encoding: HarmonyEncoding | None = None,
    with_reaper: bool = True,
    with_mcp: bool = True,
    worker_id: str | None = None,
    dispatch: Dispatch | None = None,
    send_webhook: SendDelivery | None = None,
    frontend: Frontend | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> WorkerContext:
    """Bring a worker up (see the module docstring); raises EngineStartError if the engine fails,
    StoreAwayAtStart if Redis does not answer, or the database does not, is not migrated to this build's
    schema, or refuses writes, within ``save_retry_seconds`` (or ``stopping`` says so first)."""
    wait_for_redis(settings.redis_url, settings.save_retry_seconds, stopping)
    # Before the engine: a vLLM start takes minutes, and its memory is better not held by a worker that
    # cannot serve yet. Its statements warmed and its pool opened there, inside the wait.
    db = _database(settings)
    try:
        wait_for_database(db, settings.save_retry_seconds, stopping)
    except BaseException:
        db.dispose()
        raise
    loop = EngineLoop().start()
    try:
        encoding = encoding or load_encoding(settings.tiktoken_dir)
        connections = _redis_connections(settings)
        redis_client = loop.run(_async_redis(settings.redis_url, connections))
        outages = StoreOutages(outage_log)
        ctx = WorkerContext(
            settings=settings,
            worker_id=worker_id or new_worker_id(),
            loop=loop,
            encoding=encoding,
            tokenizer=_tokenizer(settings, encoding),
            engine=engine or build_engine(settings, encoding, frontend),
            db=db,
            redis=redis_client,
            sync_redis=_sync_redis(settings.redis_url, connections),
            # Its own connection, opened with this client's settings and never retried (see RECONNECT).
            # Its outages told with the worker's other loops' (the reaper's passes end one as soon as Redis answers).
            writer=EventWriter(redis_client, ttl_seconds=settings.event_ttl_seconds, outage=outages.redis),
            cancels=CancelListener(redis_client, outages.redis),
            mcp_pool=McpSessionPool() if with_mcp else None,
            sealer=build_sealer(settings.encryption_key_values),
            dispatch=dispatch,
            outages=outages,
        )
        if send_webhook is not None:
            ctx.webhooks = WebhookNotifier(settings, send_webhook)
        loop.run(_start_on_loop(ctx))
    except BaseException:
        loop.stop()
        db.dispose()
        raise
    if with_reaper:
        ctx.reaper = _reaper(ctx)
        ctx.reaper.start()
    log.info("worker %s ready: model %s, engine %s", ctx.worker_id, settings.worker_model, settings.engine)
    return ctx


def _tokenizer(settings: Settings, encoding: HarmonyEncoding) -> PromptTokenizer:
    return PromptTokenizer(encoding, settings.tiktoken_dir, process_above_chars=settings.render_process_above_chars,
                           cache_bytes=settings.render_cache_bytes)


def _database(settings: Settings) -> Database:
    # Kept open, not opened and closed per transaction (storage/db.py says why). Sized for the database,
    # not per Celery thread: transactions are short, and PostgreSQL's connections few.
    return Database(settings.database_url, pool_size=settings.database_pool_size,
                    prepared_statements=settings.database_prepared_statements)


def _reaper(ctx: WorkerContext) -> Reaper:
    settings = ctx.settings
    return Reaper(
        ctx.db, ctx.sync_redis, worker_id=ctx.worker_id, interval_seconds=settings.reaper_interval_seconds,
        lease_seconds=settings.lease_seconds, event_ttl_seconds=settings.event_ttl_seconds,
        dispatch=ctx.dispatch, stale_queued_seconds=settings.stale_queued_seconds, webhooks=ctx.webhooks,
        retention_seconds=settings.response_retention_seconds, outages=ctx.outages, unreleased=ctx.unreleased,
        unstored_ttl_seconds=settings.stream_ttl_seconds(store=False),
    )


def _redis_connections(settings: Settings) -> int:
    # redis-py's pools refuse a 101st connection by default; every running response may hold one at
    # once (lease renewal, cancel check), so the pools are sized for them and wait, never refuse.
    return max(100, 2 * settings.worker_concurrency + 16)


# After a Redis restart every pooled connection is dead, and each fails its next command: leases,
# cancel flags, journal reads and the reaper's calls are safe to repeat, so their clients reconnect
# and retry. The event writer (its own connection, eventlog/pipe.py) does not: its journal RPUSH must
# never land twice, and a failed flush already leaves the response to a takeover that writes what is
# missing.
RECONNECT = Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3)


def _sync_redis(url: str, max_connections: int) -> SyncRedis:
    # The task threads' and the reaper's: their commands are safe to repeat (RECONNECT).
    return redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=None, retry=RECONNECT, driver_info=driver_info(),
        **silent_peer_guards(),
    ))


async def _async_redis(url: str, max_connections: int) -> redis_asyncio.Redis:
    # Built on the loop that will use it: redis.asyncio connections belong to one event loop.
    retry = AsyncRetry(ExponentialBackoff(cap=1.0, base=0.05), RECONNECT._retries)
    pool = reset_is_lost_connection(redis_asyncio.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=None, retry=retry, driver_info=driver_info(),
        **silent_peer_guards(),
    ))
    return redis_asyncio.Redis(connection_pool=pool)
