"""The Celery task and the worker bootstep that brings the engine up before any task runs.

The bootstep starts with the worker (before it consumes): it builds the :class:`WorkerContext`
(engine started on the engine loop, readiness key, cancel listener, reaper). An engine that fails to
start raises out of the bootstep, so Celery stops the worker with the reason instead of serving.

Shutdown (SIGTERM, Ctrl-C): Celery's ``worker_shutting_down`` signal comes first, before Celery waits
for running tasks; then every running response is handed off (``handoff``), so the tasks end within a
second or so and the worker exits well inside an orchestrator's grace period. A task that starts
after that sends its response back to the queue untouched. Celery stops this step before its pool (it
requires the pool): the step's stop hands off what still runs (a shutdown that sent no signal:
``celery control shutdown``, SIGQUIT) and waits for the task threads (``WorkerContext.stop``) before the
engine goes.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, bootsteps, signals
from celery.app import trace as celery_trace
from celery.apps import worker as celery_worker
from celery.exceptions import Reject
from celery.platforms import EX_FAILURE
from celery.worker import state as worker_state

from oss_responses.broker import stop_popping
from oss_responses.config import Settings
from oss_responses.engine.base import EngineDead
from oss_responses.engine.frontends import Frontend
from oss_responses.errors import VocabularyError
from oss_responses.fdlimit import raise_open_files_limit
from oss_responses.heap import tune_garbage_collection
from oss_responses.logs import configure_logging, log_context, say_as_json
from oss_responses.metrics import LEASE_LOSSES, TASK_OUTCOMES
from oss_responses.outage_log import OutageLog, describe
from oss_responses.schemas import build_protocol_schemas
from oss_responses.statuses import RUN_RESPONSE_TASK
from oss_responses.task_messages import send_run_response
from oss_responses.webhooks.events import DELIVER_WEBHOOK_TASK, task_argsrepr
from oss_responses.webhooks.notify import SendDelivery
from oss_responses.webhooks.sweeper import WebhookSweeper
from oss_responses.webhooks.tasks import register_webhook_task
from oss_responses.workers import handoff, run_end, runner
from oss_responses.workers.broker_log import ignore_cancel_notice, tell_reconnects_as_outage
from oss_responses.workers.context import Dispatch, EngineStartError, WorkerContext, start_worker
from oss_responses.workers.metrics import MetricsServer
from oss_responses.workers.outage import Backoff, StoreAwayAtStart, unreachable, warn_failed
from oss_responses.workers.pool import UnsupportedOption, refuse_autoscale
from oss_responses.workers.run_state import Outcome

log = logging.getLogger(__name__)


_context: WorkerContext | None = None
_metrics_server: MetricsServer | None = None
_webhook_sweeper: WebhookSweeper | None = None
_start_error: Exception | None = None
_engine_lost: EngineDead | None = None
_served = False  # the worker context started in this process (whatever happened since)


def served() -> bool:
    """Whether this process's worker got as far as serving: started, not merely starting (a stop then is its
    start's failure, told by its own exit)."""
    return _served


def start_error() -> Exception | None:
    """Why the worker failed to start in this process (Celery itself then exits with status 0)."""
    return _start_error


def engine_lost() -> EngineDead | None:
    """Why the worker stopped serving in this process: its engine died (Celery then exits with status 0)."""
    return _engine_lost


def _exit_for_a_new_engine() -> None:
    """The engine died: the worker stops as a warm shutdown does (its consumer checks this flag on every
    turn of its loop), and the command then exits non-zero (``command.run_worker``)."""
    global _engine_lost
    _engine_lost = current_context().engine_lost
    worker_state.should_stop = EX_FAILURE


def current_context() -> WorkerContext:
    if _context is None:
        raise RuntimeError("this process has no running worker context (the worker bootstep did not run)")
    return _context


def run_response(response_id: str, secrets: dict[str, Any] | None = None) -> str:
    """Task body: run one response on this worker's engine; the outcome (completed, skipped, ...)."""
    ctx = current_context()
    model = ctx.settings.worker_model  # the queue's model: every response it brings is of that model
    with ctx.task(), log_context(response_id=response_id, model=model, worker_id=ctx.worker_id):
        outcome = _run_while_stores_answer(ctx, response_id, secrets)
        log.info("response %s: %s", response_id, outcome)
    TASK_OUTCOMES.labels(model, outcome).inc()
    if outcome == "lease_lost":
        LEASE_LOSSES.inc()
    return outcome


def _run_while_stores_answer(ctx: WorkerContext, response_id: str, secrets: dict[str, Any] | None) -> Outcome:
    """The runner (or, once the worker is stopping, the send-back), run again while the database or
    Redis does not answer, for up to ``save_retry_seconds``; past that (or stopping) the task goes back to
    its queue.

    Running the response again is what a redelivered task does: one that ended meanwhile is skipped, one
    leased elsewhere is left to its worker, one in progress is taken over from its journal.
    """
    backoff = Backoff(ctx.settings.save_retry_seconds)
    outage = None  # the store it waits for: its tries told with the worker's other loops that retry it
    while True:
        try:
            if ctx.shutting_down and ctx.dispatch is not None:
                outcome = handoff.send_back(ctx, response_id, secrets)
            else:
                outcome = runner.run_response(ctx, response_id, secrets)
        except Exception as exc:
            if not unreachable(exc):
                raise
            if backoff.exhausted() or ctx.shutting_down:
                log.warning("response %s: its stores still do not answer (%s): its task goes back to the queue",
                            response_id, describe(exc))
                raise Reject(exc, requeue=True) from exc
            if outage is None:  # a line per response that waits, not one per try
                log.warning("response %s: a store did not answer (%s): trying again until it does, for up to "
                            "%.0f s", response_id, describe(exc), ctx.settings.save_retry_seconds)
            outage = ctx.outages.of(exc)
            outage.failed(exc)
            backoff.wait()
            continue
        if outage is not None:
            outage.answered()
        return outcome


def _stop_signalled() -> bool:
    """Celery's SIGTERM/SIGINT/SIGQUIT handlers only set these (the worker stops once it has started)."""
    return worker_state.should_stop is not None or worker_state.should_terminate is not None


def make_worker_step(settings: Settings, frontend: Frontend | None = None) -> type[bootsteps.StartStopStep]:
    class EngineStep(bootsteps.StartStopStep):  # type: ignore[misc]  # Celery ships no types: its base is Any
        """Starts the worker context with the worker; stops it (engine included) at shutdown."""

        label = "oss-responses engine"
        # Started after the pool, so stopped before it. Without it Celery's boot order put this step
        # on either side of the pool, a different side per process: where the pool stopped first, a
        # shutdown that sends no ``worker_shutting_down`` (``celery control shutdown``; SIGQUIT, whose
        # cold handler fails on the threads pool before sending it) waited for every running response
        # to end instead of handing it off.
        requires = ("celery.worker.components:Pool",)

        def start(self, worker: Any) -> None:
            global _start_error
            try:
                self._start(worker)
            except (EngineStartError, StoreAwayAtStart, UnsupportedOption, VocabularyError) as exc:
                _start_error = exc
                self.stop(worker)
                # Its reason says it all: Celery's "Unrecoverable error" line added a traceback of this
                # start-up. A SystemExit is Celery's stop without them (the same stop, the same exit status).
                log.error("the worker cannot start: %s", exc)
                raise SystemExit(EX_FAILURE) from None
            except Exception as exc:  # a bug, the metrics port...: its traceback tells where
                _start_error = exc
                self.stop(worker)
                raise

        def _start(self, worker: Any) -> None:
            global _context, _metrics_server, _webhook_sweeper, _served
            refuse_autoscale(worker)  # before the engine: refused at start, not at the first task
            raise_open_files_limit("worker")  # before the engine's processes start: they inherit it
            ignore_cancel_notice()  # here, past Celery's logging set-up, which shows every such notice
            build_protocol_schemas("worker")  # before the worker says it is ready (start_worker)
            # Before the engine: a port already taken fails the start before the worker says it is ready.
            _metrics_server = MetricsServer(settings.worker_metrics_port)
            send_webhook = webhook_sender(worker.app, settings)
            _context = start_worker(
                settings, dispatch=dispatcher(worker.app, settings), send_webhook=send_webhook, frontend=frontend,
                stopping=_stop_signalled,
            )
            _context.request_exit = _exit_for_a_new_engine
            _served = True
            if settings.webhook_endpoints:
                _webhook_sweeper = WebhookSweeper(settings, _context.db, _context.sync_redis, send_webhook,
                                                  outages=_context.outages).start()
            tune_garbage_collection("worker")  # the engine included

        def stop(self, worker: Any) -> None:
            global _context, _metrics_server, _webhook_sweeper
            if _metrics_server is not None:
                _metrics_server.stop()
                _metrics_server = None
            if _webhook_sweeper is not None:
                _webhook_sweeper.stop()
                _webhook_sweeper = None
            if _context is not None:
                _context.stop()
                _context = None

    return EngineStep


def dispatcher(app: Celery, settings: Settings) -> Dispatch:
    """Sends a response's task to its model's queue again (a takeover or a handoff)."""

    def dispatch(response_id: str, model: str, secrets: dict[str, Any] | None) -> None:
        queue = settings.queue_for(model)
        send_run_response(app, queue, response_id, secrets)

    return dispatch


def webhook_sender(app: Celery, settings: Settings) -> SendDelivery:
    """Sends a webhook delivery's task to the webhook queue."""

    def send(args: list[Any]) -> None:
        queue = settings.webhook_queue
        app.send_task(DELIVER_WEBHOOK_TASK, args=args, argsrepr=task_argsrepr(args), queue=queue, routing_key=queue)

    return send


def _stop_taking_tasks(**_: Any) -> None:
    stop_popping()  # the consumer's pending pop answered now: it sees the stop without waiting out the pop


def _hand_off_on_shutdown(
    sig: str | None = None, how: str | None = None, exitcode: int | None = None, **_: Any
) -> None:
    if _context is not None:
        handed = _context.hand_off_all()
        log.warning("worker shutting down (%s): handing off %d running responses", how or sig, handed)


def _cancel_revoked(sender: Any = None, request: Any = None, terminated: bool = False, **_: Any) -> None:
    """Celery revoked a ``run_response`` task. Discarded unrun (``celery control revoke ID``), its queued
    response is cancelled (``run_end.cancel_revoked``): it had stayed ``queued``, its stream open, until the
    stale sweep sent its task again and it ran after all. Terminated while it ran (``--terminate``), its
    response is cancelled as a client's cancel would (``run_end.cancel_terminated``)."""
    if getattr(sender, "name", None) != RUN_RESPONSE_TASK or _context is None or not request.args:
        return
    response_id = request.args[0]
    with log_context(response_id=response_id, model=_context.settings.worker_model, worker_id=_context.worker_id):
        try:
            if terminated:
                run_end.cancel_terminated(_context, response_id)
                log.info("response %s: its task was terminated: cancelling it", response_id)
                return
            outcome = run_end.cancel_revoked(_context, response_id)
        except Exception as exc:  # the stores: it stays queued, and the stale sweep sends its task again
            warn_failed(log, exc, "response %s: its task was revoked, and cancelling it failed", response_id)
            return
        log.info("response %s: its task was revoked: %s", response_id, outcome)
    TASK_OUTCOMES.labels(_context.settings.worker_model, outcome).inc()


def register(app: Celery, settings: Settings, frontend: Frontend | None = None) -> None:
    app.task(
        name=RUN_RESPONSE_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True, shared=False,
    )(run_response)
    register_webhook_task(app, settings, lambda: current_context().db)
    app.steps["worker"].add(make_worker_step(settings, frontend))
    signals.worker_shutting_down.connect(_stop_taking_tasks, weak=False)
    signals.worker_shutting_down.connect(_hand_off_on_shutdown, weak=False)
    signals.task_revoked.connect(_cancel_revoked, weak=False)

    # Connected, this replaces Celery's own logging set-up: the worker logs as the API does (logs.py).
    def setup_logging(**_: Any) -> None:
        configure_logging(settings)
        quiet_rejects()
        tell_reconnects_as_outage(_redis_outage)
        if settings.log_format == "json":
            celery_worker.safe_say = say_as_json

    signals.setup_logging.connect(setup_logging, weak=False)


def _redis_outage() -> OutageLog | None:
    """This worker's Redis outage, told by all its loops (none before its context is built)."""
    return _context.outages.redis if _context is not None else None


def quiet_rejects() -> None:
    """Celery's line for a rejected task without its traceback. The task rejects itself only to go back to
    its queue while its stores do not answer (``run_response``), after a line of its own saying so: Celery's
    traceback of the ``Reject`` said nothing more, once per task a Redis or database outage met."""
    celery_trace.log_policy_reject = celery_trace.log_policy_reject._replace(traceback=0)
