"""What a run asks of the engine: its prompt (planned, tokenised, cut to fit) and its sampling settings.

The prompt is rendered in the task thread when it can be known there (:func:`render_early`: a request
without MCP servers, whose listings can add to it), else on the engine loop with the planning in a
thread and the tokenising in the worker's PromptTokenizer (:func:`render`): never on the loop itself,
where a large input would stall every running response (prompt_tokenizer.py). Both give the same
prompt for the same request and history, so a takeover renders what its lost worker rendered.
"""

from __future__ import annotations

import asyncio
from typing import Any

from oss_responses.engine.base import ContextLimited, SamplingSettings
from oss_responses.engine.response_format import (
    REQUIRED_CALL_KEY,
    STRICT_CALLS_KEY,
    STRUCTURED_OUTPUT_KEY,
    structured_output_spec,
)
from oss_responses.harmony.history import listed_tools
from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.harmony.render import (
    ConversationPlan,
    ConversationTurn,
    RenderedPrompt,
    RenderOptions,
    forced_call_header,
    forced_call_names,
    function_call_header_rest,
    plan_conversation,
    rendered_prompt,
    strict_functions,
)
from oss_responses.harmony.truncation import WHOLE, Cut, context_budget, truncation_cut
from oss_responses.requests import CreateResponseRequest
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.job import Job, job_render_options
from oss_responses.workers.tooling import uses_mcp


def render_early(ctx: WorkerContext, job: Job) -> RenderedPrompt | Exception | None:
    """A fresh start's prompt, rendered in the task thread before the engine loop takes the response:
    no hops to the loop and to a render thread on the way to the first token. None for a request with
    MCP servers (listing tools can add to its prompt). A render error is returned, to be raised where
    the loop would have rendered, so the response fails alike."""
    try:
        request = job.request()
        if uses_mcp(request):
            return None
        known = listed_tools(job.history, request.input_items())
        options = job_render_options(ctx.settings, job.record, known, ctx.sealer)
        plan, messages = _plan(request, job.history, options)
        token_ids = _tokens_now(ctx, plan, messages)
        if (cut := _truncation(ctx, request, plan, token_ids)) is not None:
            plan, messages = _plan(request, job.history, options, cut)
            token_ids = _tokens_now(ctx, plan, messages)
    except Exception as exc:
        return exc
    return rendered_prompt(plan, token_ids, messages)


async def render(
    ctx: WorkerContext, job: Job, request: CreateResponseRequest, known: dict[str, Any]
) -> RenderedPrompt:
    """The prompt, on the engine loop, with the tools listed so far (``known``)."""
    options = job_render_options(ctx.settings, job.record, known, ctx.sealer)
    plan, messages = await asyncio.to_thread(_plan, request, job.history, options)
    token_ids = await _tokens(ctx, plan, messages)
    if (cut := _truncation(ctx, request, plan, token_ids)) is not None:
        plan, messages = await asyncio.to_thread(_plan, request, job.history, options, cut)
        token_ids = await _tokens(ctx, plan, messages)
    return rendered_prompt(plan, token_ids, messages)


def _tokens_now(ctx: WorkerContext, plan: ConversationPlan, messages: list[dict[str, Any]]) -> list[int]:
    return ctx.tokenizer.tokenize_blocking(messages, for_completion=plan.approval is None)


async def _tokens(ctx: WorkerContext, plan: ConversationPlan, messages: list[dict[str, Any]]) -> list[int]:
    return await ctx.tokenizer.tokenize(messages, for_completion=plan.approval is None)


def _plan(
    request: CreateResponseRequest, history: list[ConversationTurn], options: RenderOptions, cut: Cut = WHOLE
) -> tuple[ConversationPlan, list[dict[str, Any]]]:
    plan = plan_conversation(request, history, options, cut=cut)
    return plan, [message.to_dict() for message in plan.messages]


def _truncation(
    ctx: WorkerContext, request: CreateResponseRequest, plan: ConversationPlan, token_ids: list[int]
) -> Cut | None:
    """With ``truncation: "auto"``, what the prompt keeps of the conversation to leave the answer its
    room in the model's context (``harmony/truncation.py``); None when it stays whole. The same request
    and history give the same cut, so a takeover renders the prompt its lost worker rendered."""
    budget = prompt_budget(ctx, request)
    if budget is None:
        return None
    cut = truncation_cut(plan.messages, plan.conversation_start, token_ids, budget)
    return None if cut is None or cut == WHOLE else cut


def prompt_budget(ctx: WorkerContext, request: CreateResponseRequest) -> int | None:
    """With ``truncation: "auto"``, the most tokens the model's context may hold before an engine call: the
    rest is the answer's room, the request's output budget, at most half the context. None: never cut."""
    limit = ctx.engine.context_tokens if isinstance(ctx.engine, ContextLimited) else None
    if request.truncation != "auto" or limit is None:
        return None
    return context_budget(limit, ctx.settings.output_budget(request.model, request.max_output_tokens))


def forced_tokens(ctx: WorkerContext, request: CreateResponseRequest) -> list[int] | None:
    """The start of the call ``tool_choice`` makes the model write (``forced_call_header``), as tokens."""
    header = forced_call_header(request, ctx.settings.builtin_tool_labels)
    return list(ctx.encoding.encode(header, allowed_special="all")) if header else None


def sampling(
    ctx: WorkerContext, request: CreateResponseRequest, mcp_tools: dict[str, list[McpToolSpec]]
) -> SamplingSettings:
    return SamplingSettings(
        max_tokens=ctx.settings.output_budget(request.model, request.max_output_tokens),
        stop_token_ids=ctx.stop_token_ids,
        temperature=request.temperature,
        top_p=request.top_p,
        seed=request.seed,
        extra=_constraints(ctx, request, mcp_tools),
        stream_interval=ctx.settings.stream_interval,
    )


def _constraints(
    ctx: WorkerContext, request: CreateResponseRequest, mcp_tools: dict[str, list[McpToolSpec]]
) -> dict[str, Any]:
    """What the engine constrains: the answer to ``text.format``, strict functions' arguments to their
    schemas, and the name of a function or MCP tool ``tool_choice`` requires to one of those shown."""
    extra: dict[str, Any] = {}
    spec = structured_output_spec(request.text.format if request.text else None)
    if spec is not None:
        extra[STRUCTURED_OUTPUT_KEY] = spec
    if calls := strict_functions(request):
        extra[STRICT_CALLS_KEY] = calls
    forced = forced_tokens(ctx, request)
    if forced and (names := forced_call_names(request, ctx.settings.builtin_tool_labels, mcp_tools)):
        rests = [list(ctx.encoding.encode(function_call_header_rest(name), allowed_special="all")) for name in names]
        extra[REQUIRED_CALL_KEY] = {"after": forced, "rests": rests}
    return extra
