"""The job of one response, run in a Celery task thread; the generation itself runs on the engine loop.

    load row + chain (SQL) ─ terminal or gone? skip
    take the lease ─ held by another worker? skip
    register for cancel, then check the cancel flag ─ set? cancelled, stream closed, nothing generated
    queued → in_progress (SQL)
    tools resolved, in_progress event, tool lists streamed, prompt rendered, an answered approval
    run or declined, generation (engine loop) ─ any exception fails the response
    drain the events (the terminal one included) → save the turn (SQL) → close the stream
    release the lease

SQL runs here in the task thread; Redis and the engine only on the engine loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from openai.types.responses import Response

from oss_responses.engine.base import SamplingSettings
from oss_responses.eventlog.writer import EventWriteError
from oss_responses.harmony.history import listed_tools
from oss_responses.harmony.render import RenderedPrompt, render_prompt
from oss_responses.harmony.translator import ApprovalPolicy, ResponseTranslator
from oss_responses.requests import CreateResponseRequest
from oss_responses.storage import delete_response, save_turn, transition, utcnow
from oss_responses.workers.cancel import is_cancel_requested
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.generation import Generation, StopCause
from oss_responses.workers.job import Job, job_render_options, load_job
from oss_responses.workers.lease import Lease
from oss_responses.workers.stream_tail import next_sequence_number
from oss_responses.workers.tooling import approval_policy, list_new_tools, prepare_tools

log = logging.getLogger(__name__)

Outcome = Literal[
    "completed", "incomplete", "failed", "cancelled", "missing", "skipped", "leased_elsewhere", "lease_lost"
]


def run_response(ctx: WorkerContext, response_id: str, secrets: dict | None = None) -> Outcome:  # type: ignore[type-arg]
    """Run one response to its end (the body of the Celery task)."""
    job = load_job(ctx.db, response_id, secrets)
    if job is None:
        return "missing"
    if job.record.status != "queued":
        return _skip_started(ctx, job)
    lease = Lease(ctx.redis, response_id, ctx.worker_id, ctx.settings.lease_seconds)
    if not ctx.loop.run(lease.acquire()):
        return "leased_elsewhere"
    try:
        return _run_leased(ctx, job, lease)
    finally:
        ctx.loop.run(lease.release())


def _skip_started(ctx: WorkerContext, job: Job) -> Outcome:
    """A redelivered task: terminal → nothing to do; in_progress → lost worker, the reaper's case."""
    if job.record.status == "in_progress" and ctx.reaper is not None:
        ctx.reaper.reap(job.response_id)  # fails it now if no live worker holds its lease
    return "skipped"


@dataclass
class _Run:
    ctx: WorkerContext
    job: Job
    lease: Lease
    first_sequence_number: int = 0
    translator: ResponseTranslator | None = None
    generation: Generation | None = None
    rendered: RenderedPrompt | None = None
    stop_cause: StopCause | None = None  # asked before the generation existed


def _run_leased(ctx: WorkerContext, job: Job, lease: Lease) -> Outcome:
    run = _Run(ctx, job, lease)
    ctx.loop.run(_register(run))
    try:
        if ctx.loop.run(is_cancel_requested(ctx.redis, job.response_id)):
            return _cancel_queued(ctx, job)
        if not ctx.db.run(transition, job.response_id, from_statuses=("queued",), to_status="in_progress"):
            return "skipped"  # cancelled by the API meanwhile
        return _execute(run)
    finally:
        ctx.cancels.unregister(job.response_id)  # a dict pop: safe from this thread


async def _register(run: _Run) -> None:
    """Cancel and a lost lease both stop the run; the lease is renewed while it runs."""
    run.ctx.cancels.register(run.job.response_id, lambda: _stop(run, "cancelled"))
    run.lease.keep_alive()
    run.lease.on_lost = lambda: _stop(run, "lease_lost")


def _stop(run: _Run, cause: StopCause) -> None:
    if run.generation is not None:
        run.generation.stop(cause)
    elif run.stop_cause is None:
        run.stop_cause = cause


def _cancel_queued(ctx: WorkerContext, job: Job) -> Outcome:
    cancelled = job.record.response | {"status": "cancelled"}
    won = ctx.db.run(
        transition, job.response_id, from_statuses=("queued",), to_status="cancelled",
        response=cancelled, completed_at=utcnow(),
    )
    if won:
        ctx.loop.run(_close_stream(ctx, job.response_id, "cancelled"))
    return "cancelled"


def _execute(run: _Run) -> Outcome:
    ctx, job = run.ctx, run.job
    try:
        first = ctx.loop.run(next_sequence_number(ctx.redis, job.response_id))
        run.first_sequence_number = first or 0
        ctx.loop.run(_generate(run, job.request()))
    except Exception as exc:
        log.exception("response %s failed", job.response_id)
        _fail(run, f"The response failed in the worker: {type(exc).__name__}: {exc}")
    if run.generation is not None and run.generation.stop_cause == "lease_lost":
        return "lease_lost"
    return _finish(run)


def _translator(run: _Run, approval_required: ApprovalPolicy | None = None) -> ResponseTranslator:
    """Made before the prompt is rendered (the tool listings stream first); ``use_prompt`` follows."""
    return ResponseTranslator(
        Response.model_validate(run.job.record.response),
        encoding=run.ctx.encoding,
        first_sequence_number=run.first_sequence_number,
        approval_required=approval_required,
        max_tool_calls=run.job.record.request.get("max_tool_calls"),
    )


def _fail(run: _Run, message: str) -> None:
    if run.translator is None:  # failed before generating: in_progress first, then failed
        run.translator = _translator(run)
        events = run.translator.start() + run.translator.fail(message)
    else:
        events = run.translator.fail(message)
    if events:
        run.ctx.loop.run(_append(run.ctx, run.job.response_id, events))


async def _append(ctx: WorkerContext, response_id: str, events: list) -> None:  # type: ignore[type-arg]
    ctx.writer.append(response_id, events)


async def _generate(run: _Run, request: CreateResponseRequest) -> None:
    """On the engine loop: tools resolved, translator started, tools listed, prompt, then generation."""
    ctx, job = run.ctx, run.job
    tools = await prepare_tools(ctx.mcp_pool, request, ctx.settings)
    known = listed_tools(job.history, request.input_items())  # grows with this response's listings
    run.translator = _translator(run, approval_policy(tools.servers, known))
    emit = partial(ctx.writer.append, job.response_id)
    emit(run.translator.start())
    listed = await list_new_tools(tools, known, run.translator, emit) if tools.servers else {}
    known.update(listed)
    run.rendered = render_prompt(request, job.history, job_render_options(ctx.settings, job.record, listed), ctx.encoding)
    run.translator.use_prompt(
        mcp_labels=run.rendered.mcp_labels,
        input_tokens=len(run.rendered.token_ids),
        function_namespaces=run.rendered.function_namespaces,
    )
    run.generation = Generation(
        job.response_id, ctx.engine, ctx.writer, run.translator, tools.executor, _sampling(ctx, request)
    )
    if run.stop_cause is not None:
        run.generation.stop(run.stop_cause)
    await run.generation.run(run.rendered.token_ids, run.rendered.approval)


def _sampling(ctx: WorkerContext, request: CreateResponseRequest) -> SamplingSettings:
    return SamplingSettings(
        max_tokens=request.max_output_tokens or ctx.settings.default_max_output_tokens,
        stop_token_ids=tuple(ctx.encoding.stop_tokens_for_assistant_actions()),
        temperature=request.temperature,
        top_p=request.top_p,
        seed=request.seed,
    )


def _finish(run: _Run) -> Outcome:
    """Drain the events, store the turn, close the stream."""
    ctx, job, translator = run.ctx, run.job, run.translator
    assert translator is not None
    try:
        ctx.loop.run(ctx.writer.drain(job.response_id))
    except EventWriteError:
        log.exception("events of %s did not all reach Redis; storing its end anyway", job.response_id)
    status = translator.response.status or "failed"
    if _save(run) or not job.record.store:
        ctx.loop.run(_close_stream(ctx, job.response_id, status))
    return status  # type: ignore[return-value]


def _save(run: _Run) -> bool:
    job, translator = run.job, run.translator
    assert translator is not None
    rendered = run.rendered
    response = translator.response
    with run.ctx.db.session() as session:
        ended = save_turn(
            session, job.response_id, status=response.status or "failed",  # type: ignore[arg-type]
            response=response.model_dump(mode="json", by_alias=True),
            output_messages=translator.output_messages,
            function_calls={**(rendered.function_calls if rendered else {}), **translator.function_calls},
            input_messages=rendered.new_messages if rendered else None,
            error=response.error.model_dump(mode="json") if response.error else None,
            state=_state(job, rendered),
        )
        if ended and not job.record.store:
            delete_response(session, job.response_id)
    return ended


def _state(job: Job, rendered: RenderedPrompt | None) -> dict[str, Any] | None:
    """vLLM's ``enable_response_messages`` shows the model's whole input: kept only when asked for."""
    if rendered is None or not job.record.request.get("enable_response_messages"):
        return None
    return {"prompt_messages": rendered.prompt_messages}


async def _close_stream(ctx: WorkerContext, response_id: str, status: str) -> None:
    ctx.writer.close(response_id, status)
    try:
        await ctx.writer.drain(response_id)
    except EventWriteError:
        log.exception("closing the event stream of %s failed", response_id)
