"""The app factory: nothing is built at import time; the lifespan opens and closes the services."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import anyio
from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from oss_responses.api.auth import log_auth_mode
from oss_responses.api.draining import on_stop_signals
from oss_responses.api.errors import AnswerUnexpectedErrors, install_error_handlers
from oss_responses.api.header_guard import RefuseOrigins, RefuseUnsafeHeaders
from oss_responses.api.heartbeat import Heartbeat
from oss_responses.api.metrics import MetricsExporter
from oss_responses.api.openapi import install_openapi
from oss_responses.api.relay import archived_frames
from oss_responses.api.request_id import RequestIdMiddleware
from oss_responses.api.routes import conversations, health, metrics, models, responses
from oss_responses.api.services import Services, TaskQueue, api_redis
from oss_responses.api.stream_slots import StreamSlots
from oss_responses.api.url_guard import RefuseNulInUrl
from oss_responses.config import Settings, get_settings
from oss_responses.eventlog.hub import EventHub
from oss_responses.http_protocol import CORS_EXPOSED
from oss_responses.prompt_tokenizer import PromptTokenizer
from oss_responses.sealing import build_sealer
from oss_responses.storage import AsyncDatabase
from oss_responses.vocab import load_encoding


@asynccontextmanager
async def _open_services(settings: Settings) -> AsyncIterator[Services]:
    sealer = build_sealer(settings.encryption_key_values)  # first: a bad key stops the start-up here
    tokenizer = await _prompt_tokenizer(settings)
    db = AsyncDatabase(settings.database_url, pool_size=settings.database_pool_size,
                       prepared_statements=settings.database_prepared_statements)
    redis = api_redis(settings.redis_url)
    hub = EventHub(settings.redis_url, archive=partial(archived_frames, db),
                   heartbeat_seconds=settings.stream_ping_seconds, rewound_ttl_seconds=settings.event_ttl_seconds)
    tasks = TaskQueue(settings.celery_broker_url, settings.webhook_queue)
    exporter = MetricsExporter(settings, tasks.broker_url)
    heartbeat = Heartbeat(redis)
    await hub.start()
    await redis.ping()  # its first connection now, not in the first accept (~1.3 ms)
    await tasks.warm([settings.queue_for(model) for model in settings.models] + [settings.webhook_queue])
    await heartbeat.start()
    try:
        yield Services(settings=settings, db=db, redis=redis, hub=hub, tasks=tasks,
                       tokenizer=tokenizer, metrics=exporter, heartbeat=heartbeat, sealer=sealer,
                       streams=StreamSlots(settings.max_streams_per_key))
    finally:
        await hub.stop()
        await heartbeat.stop()  # after the hub: the cancels of the streams it cut have been asked
        await anyio.to_thread.run_sync(tokenizer.close)  # its child may be tokenising
        await tasks.aclose()
        exporter.close()
        await redis.aclose()
        await db.dispose()


async def _prompt_tokenizer(settings: Settings) -> PromptTokenizer:
    """harmony's encoding loaded before the API serves: loading it holds the GIL for 0.3 s here (1.2 s seen on
    CI), which on the first count would have stalled every stream this process relays (55 MB, once a process)."""
    encoding = await anyio.to_thread.run_sync(load_encoding, settings.tiktoken_dir)
    return PromptTokenizer(encoding, settings.tiktoken_dir, process_above_chars=settings.render_process_above_chars,
                           cache_bytes=settings.render_cache_bytes)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log_auth_mode(settings)
        async with _open_services(settings) as services:
            app.state.services = services
            with on_stop_signals(services.hub.end_client_streams):
                yield

    # No redirect to the path without its trailing slash: Starlette builds the Location from the request's
    # Host header, and would answer it before any API key is checked.
    app = FastAPI(title="oss-responses", version="0.1.0", lifespan=lifespan, redirect_slashes=False)
    install_error_handlers(app)
    # Added innermost first. Every answer but an origin's refusal is made inside CORS and the request id, so
    # that an allowed page reads it and its log lines are found: a refusal before any route and an
    # unexpected error (Starlette answers that one outside every middleware) included.
    app.add_middleware(AnswerUnexpectedErrors)
    app.add_middleware(RefuseUnsafeHeaders)
    app.add_middleware(RefuseNulInUrl)
    if settings.allowed_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.allowed_origins, allow_methods=["*"],
                           allow_headers=["*"], expose_headers=list(CORS_EXPOSED))
    app.add_middleware(RefuseOrigins, allowed_origins=settings.allowed_origins)
    app.add_middleware(RequestIdMiddleware)
    app.include_router(responses.router)
    app.include_router(conversations.router)
    app.include_router(models.router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    install_openapi(app)
    return app
