"""``python -m oss_responses.api``: serve the API with uvicorn on ``api_host:api_port``.

With ``api_processes`` above 1, uvicorn's supervisor serves the port from that many processes (spawned:
each builds its own app through :func:`process_app`; one that dies is started again). One API process
relays every event of its streams on one core, about 40 µs each at a GPU's pace (``bench/engine.py``), so
one GPU's output nearly fills it: several processes use a host's cores without a proxy in front of
several ports. Their metrics meet in one ``PROMETHEUS_MULTIPROC_DIR`` (``api/metrics.py``): the
operator's, or a folder of this run's own.
"""

from __future__ import annotations

import contextlib
import logging
import sys

import redis
import uvicorn
from fastapi import FastAPI
from uvicorn.config import STARTUP_FAILURE

from oss_responses.api.app import create_app
from oss_responses.api.metrics import forget_dead_processes, multiprocess_folder
from oss_responses.api.server import ApiServer
from oss_responses.broker import BrokerNotRedis, redis_broker_url
from oss_responses.config import Settings, get_settings
from oss_responses.errors import VocabularyError
from oss_responses.fdlimit import raise_open_files_limit
from oss_responses.heap import tune_garbage_collection
from oss_responses.http_protocol import server_options
from oss_responses.logs import configure_logging, safe_url
from oss_responses.schemas import build_protocol_schemas
from oss_responses.vocab import ensure_vocabulary

log = logging.getLogger(__name__)


def main() -> None:
    settings = get_settings()
    configure_logging(settings)
    _exit_unless_redis_answers(settings)
    # Unpacked now, not by the first /v1/responses/input_tokens request (which loads the encoding).
    try:
        ensure_vocabulary(settings.tiktoken_dir)
    except VocabularyError as exc:
        log.error("the API cannot start: %s", exc)
        sys.exit(STARTUP_FAILURE)
    raise_open_files_limit("api")  # several processes inherit it
    # log_config=None: uvicorn's loggers propagate to the root handler configured above.
    if settings.api_processes == 1:
        _serve_one(settings)
        return
    with multiprocess_folder():
        uvicorn.run("oss_responses.api.__main__:process_app", factory=True, workers=settings.api_processes,
                    host=settings.api_host, port=settings.api_port, log_config=None, **server_options(settings))


def _exit_unless_redis_answers(settings: Settings) -> None:
    """Redis (and the broker, where it is another) asked once before serving: the event hub's start needs it,
    and its failure there was uvicorn's traceback of the app's lifespan, which named neither the store nor its
    URL. Exits as that failure did (status 3), in one line."""
    stores = [("Redis", settings.redis_url)]
    try:
        broker = redis_broker_url(settings.celery_broker_url)
    except BrokerNotRedis as exc:
        log.error("the API cannot start: %s", exc)
        sys.exit(STARTUP_FAILURE)
    if broker != settings.redis_url:  # the Redis the API pushes tasks to, as Celery resolves it
        stores.append(("the broker", broker))
    for what, url in stores:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
        try:
            client.ping()
        except (redis.RedisError, OSError) as exc:
            log.error("the API cannot start: %s at %s did not answer (%s: %s)", what, safe_url(url),
                      type(exc).__name__, exc)
            sys.exit(STARTUP_FAILURE)
        finally:
            client.close()


def _serve_one(settings: Settings) -> None:
    """``uvicorn.run`` for one process, on the API's own server (it wakes once a second when idle)."""
    config = uvicorn.Config(_ready_app(settings), host=settings.api_host, port=settings.api_port, log_config=None,
                            **server_options(settings))
    server = ApiServer(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:  # as uvicorn.run: the port was taken, or the app's start-up failed
        sys.exit(STARTUP_FAILURE)


def process_app() -> FastAPI:
    """uvicorn's factory in each of several API processes (a fresh interpreter: nothing is inherited)."""
    settings = get_settings()
    configure_logging(settings)
    return _ready_app(settings)


def _ready_app(settings: Settings) -> FastAPI:
    forget_dead_processes()  # of the deployment's earlier processes, when their metrics folder is kept
    app = create_app(settings)
    build_protocol_schemas("api")
    tune_garbage_collection("api")  # here, not in the app's lifespan: tests run the app inside pytest
    return app


if __name__ == "__main__":
    main()
