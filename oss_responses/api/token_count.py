"""``POST /v1/responses/input_tokens``: the prompt a create request would render, counted.

The API renders it with harmony exactly as a worker would (system and developer messages, the stored
turns of ``previous_response_id``, the input, sealed items opened), with one difference: an MCP
server's tools are shown only if the conversation already holds a list of them (a worker lists a
new server before rendering; counting does not connect to it), so such tools are not counted.

With ``truncation: "auto"`` the prompt is cut as a worker of the model would cut it, by the context its
workers announce in Redis while up (``redis_keys.model_context``); the answer's room is the default output
budget (a count request has no ``max_output_tokens``). With no worker of the model up, nothing is cut.

The harmony encoding is loaded once per API process, at its start (``app.py``); rendering runs in a
thread, and a costly prompt's tokens are computed in a child process (``prompt_tokenizer.py``).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import anyio
from openai.types.responses import InputTokenCountResponse
from redis.exceptions import ResponseError

from oss_responses import redis_keys
from oss_responses.api.auth import Owner
from oss_responses.api.services import Services
from oss_responses.conversation import render_options
from oss_responses.errors import BadRequest
from oss_responses.harmony.history import ConversationTurn
from oss_responses.harmony.render import render_prompt
from oss_responses.harmony.truncation import context_budget
from oss_responses.redis_refusals import wrong_type
from oss_responses.requests import CreateResponseRequest, parse_create_request
from oss_responses.storage import utcnow

log = logging.getLogger(__name__)

# The create-request fields that change the prompt (InputTokenCountParams has these and conversation).
COUNT_FIELDS = (
    "model", "input", "instructions", "previous_response_id", "reasoning", "text", "tool_choice", "tools",
    "parallel_tool_calls", "truncation", "conversation",
)


def parse_count_request(body: Any, default_model: str) -> CreateResponseRequest:
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    if unknown := sorted(set(body) - set(COUNT_FIELDS)):  # a create's own fields too (stream, store...)
        raise BadRequest(f"Unknown parameter: '{unknown[0]}'.", param=unknown[0], code="unknown_parameter")
    fields = {key: body[key] for key in COUNT_FIELDS if body.get(key) is not None}
    return parse_create_request({"model": default_model} | fields)


async def count_input_tokens(
    services: Services, request: CreateResponseRequest, history: list[ConversationTurn], owner: Owner
) -> dict[str, Any]:
    """``history`` is the chain's turns, the request's item references already resolved against it."""
    options = render_options(services.settings, utcnow(), sealer=services.sealer, owner=owner.name)
    tokenizer = services.tokenizer
    budget = await _truncation_budget(services, request)
    rendered = await anyio.to_thread.run_sync(
        partial(render_prompt, request, history, options, tokenizer.encoding, budget,
                tokenize=tokenizer.tokenize_blocking)
    )
    return InputTokenCountResponse(input_tokens=len(rendered.token_ids), object="response.input_tokens").model_dump()


async def _truncation_budget(services: Services, request: CreateResponseRequest) -> int | None:
    """With ``truncation: "auto"``, the prompt's budget in the model's context as its workers announce it
    (None: no cut, as when no worker of the model is up). The request's answer room is the default
    output budget (held to the model's ceiling): a count request carries no ``max_output_tokens``."""
    if request.truncation != "auto":
        return None
    context = await _announced_context(services, request.model)
    if context is None:
        return None
    return context_budget(context, services.settings.output_budget(request.model, None))


async def _announced_context(services: Services, model: str) -> int | None:
    """The model's context as its workers announce it. A key holding another type, or a string that is no count
    (by hand, another application, a bug), is no announcement: it was a 500 until a worker of the model set it
    again (without one up, for good)."""
    key = redis_keys.model_context(model)
    try:
        context = await services.redis.get(key)
    except ResponseError as exc:
        if not wrong_type(exc):
            raise
        context = b""  # another type: no count
    if context is None:
        return None
    if context.isdigit():
        return int(context)
    log.warning("%s holds something other than a context's token count (overwritten by hand, another "
                "application or a bug): read as no announcement", key)
    return None
