"""What a run does on the engine loop, where the journal, the writer and the engine live: its translator
made, its tools resolved and listed, its prompt, its generation started (``generate``) or, taken over,
its journal replayed and generation resumed (``resume``); and a failure's events (``fail``).

``runner`` calls these from the task thread through ``ctx.loop.run``; apart from it so that starting a
run (SQL, the claim, the status) and what the run does on the loop read on their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from functools import partial
from typing import Any

from oss_responses.eventlog.writes import EventWriteError
from oss_responses.harmony.history import listed_tools
from oss_responses.harmony.hosted_items import DEFAULT_HOSTED_CALLS
from oss_responses.harmony.render import hosted_builtins, hosted_calls, offered_functions
from oss_responses.harmony.translator import ApprovalPolicy
from oss_responses.request_include import REASONING_ENCRYPTED_CONTENT
from oss_responses.requests import CreateResponseRequest
from oss_responses.workers.generation import Generation
from oss_responses.workers.journal import (
    JournaledTranslator,
    JournalError,
    Step,
    apply_translator_step,
    first_sequence_number,
    listed_in,
    split_at_prompt,
    unfinished_listings,
)
from oss_responses.workers.outage import warn_failed
from oss_responses.workers.prompting import forced_tokens, prompt_budget, render, sampling
from oss_responses.workers.run_state import Run
from oss_responses.workers.stream_tail import next_sequence_number
from oss_responses.workers.tooling import (
    PreparedTools,
    approval_policy,
    idempotent_calls,
    list_new_tools,
    prepare_tools,
)

log = logging.getLogger(__name__)


def _translator(
    run: Run,
    approval_required: ApprovalPolicy | None = None,
    request: CreateResponseRequest | None = None,
    *,
    record: bool = True,
) -> JournaledTranslator:
    """Made before the prompt is rendered (the tool listings stream first); ``use_prompt`` follows.
    ``request``: what it offers the model (``offered_functions``, ``hosted_builtins``) and what its hosted
    tools' items show (``hosted_calls``); None only for a run that fails before generating.

    Its item ids are seeded by the response id, so a takeover's replay names items alike.
    """
    settings = run.ctx.settings
    translator = JournaledTranslator(
        run.job.response,
        encoding=run.ctx.encoding,
        first_sequence_number=run.first_sequence_number,
        approval_required=approval_required,
        max_tool_calls=None if run.job.load_error else run.job.record.request.get("max_tool_calls"),
        offered_functions=None if request is None else offered_functions(request),
        hosted_builtins=frozenset() if request is None else hosted_builtins(request, settings.builtin_tool_labels),
        hosted_calls=DEFAULT_HOSTED_CALLS if request is None else hosted_calls(request),
        seal=_reasoning_seal(run),
        id_seed=run.job.response_id,
    )
    if record:
        translator.record = partial(run.ctx.writer.append_journal, run.job.response_id)
    return translator


def _reasoning_seal(run: Run) -> Callable[[list[dict[str, Any]]], str] | None:
    """Reasoning items carry encrypted_content only when the request's ``include`` asks for it."""
    sealer = run.ctx.sealer
    if sealer is None or REASONING_ENCRYPTED_CONTENT not in (run.job.record.request.get("include") or ()):
        return None
    return sealer.sealing("reasoning", run.job.record.owner)


def fail(run: Run, message: str, code: str = "server_error") -> None:
    try:
        run.ctx.loop.run(_fail_on_loop(run, message, code))
    except EventWriteError as exc:  # the stream is already broken: finish leaves the response to a takeover
        warn_failed(log, exc, "the failure of %s could not be written to its stream: leaving it to a takeover",
                    run.job.response_id)


async def _fail_on_loop(run: Run, message: str, code: str) -> None:
    """The failure's events (on the loop, where the journal and the writer live)."""
    if run.translator is None:  # failed before generating: in_progress first, then failed
        run.ctx.writer.append_journal(run.job.response_id, ["begin", run.first_sequence_number])
        run.translator = _translator(run)
        events = run.translator.start() + run.translator.fail(message, code)
    else:
        events = run.translator.fail(message, code)
    if events:
        run.ctx.writer.append(run.job.response_id, events)


async def generate(run: Run, request: CreateResponseRequest) -> None:
    """On the engine loop: tools resolved, translator started, tools listed, prompt, then generation."""
    ctx, job = run.ctx, run.job
    ctx.writer.append_journal(job.response_id, ["begin", run.first_sequence_number])
    tools = await prepare_tools(ctx.mcp_pool, request, ctx.settings, job.record.owner)
    known = listed_tools(job.history, request.input_items())  # grows with this response's listings
    run.translator = _translator(run, approval_policy(tools.servers, known), request)
    ctx.writer.append(job.response_id, run.translator.start())
    await _list_then_generate(run, request, tools, known)


async def _list_then_generate(
    run: Run, request: CreateResponseRequest, tools: PreparedTools, known: dict[str, Any],
    started: Collection[str] = (),
) -> None:
    """The tool listings still to do (``started``: opened by a lost worker), the prompt, the generation."""
    assert run.translator is not None
    emit = partial(run.ctx.writer.append, run.job.response_id)
    listed = await list_new_tools(tools, known, run.translator, emit, started) if tools.servers else {}
    known.update(listed)
    await _render(run, request, known)
    assert run.rendered is not None
    run.translator.use_prompt(
        mcp_labels=run.rendered.mcp_labels,
        input_tokens=len(run.rendered.token_ids),
        function_namespaces=run.rendered.function_namespaces,
    )
    _new_generation(run, request, tools, known)
    assert run.generation is not None
    await run.generation.run(run.rendered.token_ids, run.rendered.approval, forced=forced_tokens(run.ctx, request))


async def resume(run: Run, request: CreateResponseRequest, steps: list[Step]) -> None:
    """On the engine loop: the journal replayed (events the stream lacks written), then generation goes on.

    Lost before its prompt was rendered: the listings it left unfinished are done again into their
    items, and it goes on as a fresh run does.
    """
    ctx, job = run.ctx, run.job
    tools = await prepare_tools(ctx.mcp_pool, request, ctx.settings, job.record.owner)
    known = listed_tools(job.history, request.input_items())
    before, after = split_at_prompt(steps)
    known.update(listed_in(before))
    first = first_sequence_number(steps)
    if first is None:
        first = await next_sequence_number(ctx.redis, job.response_id) or 0
    run.first_sequence_number = first
    run.translator = _translator(
        run, approval_policy(tools.servers, known), request, record=False
    )
    events = [event for step in before for event in apply_translator_step(run.translator, step, None)]
    if after:
        await _render(run, request, known)
        assert run.rendered is not None
        _new_generation(run, request, tools, known)
        assert run.generation is not None
        events += run.generation.replay(run.rendered.token_ids, after, run.rendered.approval)
    run.translator.record = partial(ctx.writer.append_journal, job.response_id)
    await _write_missing(run, events)
    if run.fail_after_replay is not None:
        ctx.writer.append(job.response_id, run.translator.fail(run.fail_after_replay))
    elif not after:
        await _list_then_generate(run, request, tools, known, started=unfinished_listings(before))
    else:
        assert run.generation is not None
        run.generation.journal = run.translator.record
        await run.generation.resume(forced=forced_tokens(ctx, request))


async def _write_missing(run: Run, events: list[Any]) -> None:
    """The replayed events the stream does not hold yet (a flush cut short), written now."""
    next_number = await next_sequence_number(run.ctx.redis, run.job.response_id)
    if next_number is None:
        raise JournalError("the stream of this response was closed while it was in progress")
    missing = [event for event in events if event.sequence_number >= next_number]
    if missing:
        run.ctx.writer.append(run.job.response_id, missing)


async def _render(run: Run, request: CreateResponseRequest, known: dict[str, Any]) -> None:
    """The prompt rendered in the task thread (its error raised here), else rendered now."""
    early, run.early_prompt = run.early_prompt, None
    if isinstance(early, Exception):
        raise early
    run.rendered = early if early is not None else await render(run.ctx, run.job, request, known)


def _new_generation(run: Run, request: CreateResponseRequest, tools: PreparedTools, known: dict[str, Any]) -> None:
    ctx, job = run.ctx, run.job
    assert run.translator is not None
    run.generation = Generation(
        job.response_id, ctx.engine, ctx.writer, run.translator, tools.executor, sampling(ctx, request, known),
        journal=run.translator.record,
        is_idempotent=idempotent_calls(ctx.settings, known),
        context_budget=prompt_budget(ctx, request),
    )
    if run.stop_cause is not None:
        run.generation.stop(run.stop_cause)
