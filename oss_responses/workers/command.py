"""The worker command: ``python -m oss_responses.workers`` and ``oss-responses worker`` (see ``__main__``).

Its functions live here, not in ``__main__``: a front end's child process (spawned) finds
:func:`run_frontend` by its module's name, which ``__main__`` is not under ``python -m``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import redis as redis_lib
from celery import signals as celery_signals
from celery.worker import state as worker_state
from redis.backoff import NoBackoff
from redis.retry import Retry

from oss_responses.broker import BrokerNotRedis, check_redis_broker
from oss_responses.config import Settings, get_settings
from oss_responses.engine.frontends import Frontend, serve_frontends
from oss_responses.errors import VocabularyError
from oss_responses.logs import configure_logging
from oss_responses.workers.celery_app import make_celery
from oss_responses.workers.context import EngineStartError
from oss_responses.workers.outage import StoreAwayAtStart
from oss_responses.workers.pool import UnsupportedOption
from oss_responses.workers.tasks import engine_lost, served, start_error

log = logging.getLogger(__name__)
# The exit status of a worker that its stop deadline ended (``os._exit``: nothing after it runs).
EX_STOP_DEADLINE = 1
EX_ENGINE_LOST = 1  # as ``sys.exit`` with the engine's loss for its message
ENGINE_LOST = "oss-responses worker stopped: {}"  # its last line, for the orchestrator's log
# How long a stopping worker that runs no task waits for its broker's answer, once a second: silent (stopped, a
# blackholed link), the broker held Celery's own stop (its heartbeat, its pidbox's close, a reconnect), each call up
# to its socket timeout, and an idle worker waited out its whole stop deadline, then exited 1.
BROKER_CHECK_SECONDS = 1.0


def main(argv: list[str] | None = None) -> None:
    settings = get_settings()
    extra = sys.argv[1:] if argv is None else argv
    if settings.engine == "vllm" and settings.vllm_frontends > 1:
        configure_logging(settings)  # the supervisor's own lines; each worker configures its own
        try:
            status = serve_frontends(settings, partial(run_frontend, extra))
        except ValueError as exc:  # settings vLLM cannot start from (a model folder that is not one)
            sys.exit(f"oss-responses worker not started: the vllm engine failed to start: {exc}")
        sys.exit(status)
    run_worker(settings, extra)


def run_worker(settings: Settings, extra: list[str], frontend: Frontend | None = None) -> None:
    # Before Celery's own start: its warnings (running as root) are log lines from the first one.
    configure_logging(settings)
    app = make_celery(settings, frontend)
    try:
        check_redis_broker(app)
    except BrokerNotRedis as exc:
        sys.exit(f"oss-responses worker not started: {exc}")
    # The Redis the consumer reads (Celery's environment variables before the setting).
    arm = partial(_arm_stop_deadline, seconds=settings.worker_stop_seconds, broker_url=str(app.conf.broker_read_url))
    celery_signals.worker_shutting_down.connect(arm, weak=False)  # this process's own worker only (never a test's)
    args = [
        # JSON logs are for a log pipeline: Celery's banner (a block of text on stdout) is left out.
        *(["--quiet"] if settings.log_format == "json" else []),
        "worker",
        f"--concurrency={settings.worker_concurrency}",
        f"--queues={settings.queue_for(settings.worker_model)},{settings.webhook_queue}",
        "--loglevel=INFO",
        "--without-gossip",
        "--without-mingle",
        *extra,
    ]
    app.worker_main(args)
    if (error := start_error()) is not None:
        # Celery logs the failure but exits 0; a supervisor must see the worker did not serve.
        plain = isinstance(error, EngineStartError | StoreAwayAtStart | UnsupportedOption | VocabularyError)
        why = str(error) if plain else f"{type(error).__name__}: {error}"
        sys.exit(f"oss-responses worker not started: {why}")
    if (lost := engine_lost()) is not None:
        # A dead engine core cannot be started again in this process: a new worker must start it.
        sys.exit(ENGINE_LOST.format(lost))


def run_frontend(extra: list[str], frontend: Frontend) -> None:
    """One child of the supervisor: a worker whose engine is a client of the shared engine core."""
    settings = get_settings()
    if settings.worker_metrics_port:
        settings = settings.model_copy(update={"worker_metrics_port": settings.worker_metrics_port + frontend.index})
    run_worker(settings, frontend_argv(extra, frontend.index), frontend)


def frontend_argv(extra: list[str], index: int) -> list[str]:
    """``extra`` with a node name of its own for front end ``index`` (Celery's ``-n``/``--hostname``)."""
    argv = list(extra)
    for position, arg in enumerate(argv):
        if arg in ("-n", "--hostname") and position + 1 < len(argv):
            argv[position + 1] = _indexed(argv[position + 1], index)
            return argv
        for prefix in ("--hostname=", "-n"):
            if arg.startswith(prefix) and arg != "-n":
                argv[position] = prefix + _indexed(arg[len(prefix):], index)
                return argv
    return [*argv, f"--hostname=frontend-{index}@%h"]


def _indexed(name: str, index: int) -> str:
    first, at, rest = name.partition("@")
    return f"{first}-{index}{at}{rest}"


def _arm_stop_deadline(seconds: float, broker_url: str, how: str | None = None, **_: Any) -> None:
    """From Celery's ``worker_shutting_down`` (SIGTERM, SIGINT): the process exits ``seconds`` later if it is
    still there, or, once it served, as soon as it runs no task while its broker does not answer (a worker still
    starting ends with its start's failure). Celery's own stop talks to the broker (its pidbox's and consumer's
    channels closed, unacknowledged tasks restored, a worker-offline event), a call per step each up to the
    broker's socket timeout and retried, and the task threads' and the engine's stop talk to Redis too: with
    Redis silent (SIGSTOP, a blackholed link) a SIGTERM took 66 s to exit (measured), past compose's 30 s, and
    the engine was never stopped in order. Exited here, nothing is lost: the running responses' leases lapse and
    the reaper hands them on once Redis answers, and an unacknowledged task stays in the broker's unacked set."""
    threading.Thread(target=_exit_after, args=(seconds, broker_url, how), name="stop-deadline", daemon=True).start()


def _exit_after(seconds: float, broker_url: str, how: str | None) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if _idle_with_broker_silent(broker_url, min(BROKER_CHECK_SECONDS, left)):
            log.warning("stopping (%s): no task runs here and the broker does not answer, which holds Celery's own "
                        "stop: exiting now; the tasks it had taken and not started are redelivered once it answers",
                        how or "shutdown")
            if (lost := engine_lost()) is not None:  # still a failure: a new worker must start an engine
                log.error(ENGINE_LOST.format(lost))
                _exit_now(EX_ENGINE_LOST)
            _exit_now(os.EX_OK)
        time.sleep(max(0.0, min(BROKER_CHECK_SECONDS, deadline - time.monotonic())))
    log.warning("stopping (%s): not stopped within %.0f s (OSS_RESPONSES_WORKER_STOP_SECONDS; Redis or the "
                "database not answering?): exiting now; running responses go on elsewhere once their leases "
                "lapse", how or "shutdown", seconds)
    _exit_now(EX_STOP_DEADLINE)


def _idle_with_broker_silent(broker_url: str, timeout: float) -> bool:
    return served() and not worker_state.active_requests and not _broker_answers(broker_url, timeout)


def _broker_answers(url: str, timeout: float) -> bool:
    """Whether the broker answers a PING within ``timeout`` on a connection of its own (Celery's may be stuck).
    An error it answers (a refused password, an ACL without PING, still loading) is an answer: it does not hold
    Celery's stop, whose own commands get their errors as quickly."""
    client = redis_lib.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout,
                                      retry=Retry(NoBackoff(), 0))
    try:
        return bool(client.ping())
    except (redis_lib.ResponseError, redis_lib.AuthenticationError):
        return True
    except (redis_lib.RedisError, OSError):
        return False
    finally:
        client.close()


def _exit_now(status: int) -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    _kill_children()
    os._exit(status)


def _kill_children() -> None:
    """This process's children killed (SIGKILL), as an orchestrator's kill would: ``os._exit`` runs no atexit
    handler, so an engine's processes (vLLM's engine core, holding the GPU's memory) and the tokenizer's child
    would otherwise outlive the worker."""
    for listing in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        try:
            pids = listing.read_text().split()
        except OSError:  # a thread that ended meanwhile
            continue
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
