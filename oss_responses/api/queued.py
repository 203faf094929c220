"""A validated request → what the API writes when it accepts it: the queued ``Response`` (echoing
the request's settings, as OpenAI does), the request as stored, the input items, and the secrets.

MCP tools' ``authorization`` and ``headers`` are credentials: they are neither echoed nor stored in
clear; split out here (``secrets``, keyed by server label), they are stored sealed beside the response
(``jobs.accept``, ``sealing.seal_secrets``) for whichever worker runs it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, get_args

from openai.types.responses import Response, ToolChoiceTypes
from pydantic import ValidationError

from oss_responses.api.items import stored_items
from oss_responses.config import Settings
from oss_responses.errors import BadRequest
from oss_responses.harmony.builtin_tools import TOOL_TYPES
from oss_responses.harmony.ids import response_id
from oss_responses.harmony.render import ConversationPlan
from oss_responses.requests import CreateResponseRequest
from oss_responses.wire import wire_json

SECRET_TOOL_FIELDS = ("authorization", "headers")
_FIELD = re.compile(r"[a-z_][a-z0-9_]*|\d+")  # a field name or index, not a union member's tag


@dataclass(frozen=True, slots=True)
class QueuedResponse:
    response: Response
    request: dict[str, Any]  # the request as stored: secrets stripped
    input_items: list[dict[str, Any]]
    secrets: dict[str, dict[str, Any]]  # {server_label: {"authorization": ..., "headers": {...}}}
    input_messages: list[dict[str, Any]] = field(default_factory=list)  # the input as harmony messages
    function_calls: dict[str, str] = field(default_factory=dict)  # call_id -> name, of the input's calls
    conversation_through: int | None = None  # in a conversation: the position its items end at


def split_secrets(tools: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Tools without their credentials, and the credentials by MCP server label."""
    clean: list[dict[str, Any]] = []
    secrets: dict[str, dict[str, Any]] = {}
    for tool in tools:
        found = {key: tool[key] for key in SECRET_TOOL_FIELDS if tool.get(key) is not None}
        if tool.get("type") == "mcp" and found:
            secrets[tool["server_label"]] = found
        clean.append({key: value for key, value in tool.items() if key not in SECRET_TOOL_FIELDS})
    return clean, secrets


def _echo(request: CreateResponseRequest, tools: list[dict[str, Any]], settings: Settings) -> dict[str, Any]:
    reasoning = wire_json(request.reasoning, exclude_none=True) if request.reasoning else {}
    reasoning.setdefault("effort", settings.default_reasoning_effort)
    # OpenAI echoes the effective values: harmony renders earlier turns without their reasoning (a
    # tool loop's own reasoning stays), and gpt-oss has one execution mode.
    if "context" in reasoning:
        reasoning["context"] = "current_turn"
    if "mode" in reasoning:
        reasoning["mode"] = "standard"
    text = wire_json(request.text, exclude_none=True) if request.text else {}
    text.setdefault("format", {"type": "text"})
    text.setdefault("verbosity", "medium")  # OpenAI echoes its default
    return {
        "object": "response",
        "model": request.model,
        "instructions": request.instructions,
        "tools": tools,
        "tool_choice": _echoed_tool_choice(request.tool_choice),
        "parallel_tool_calls": request.parallel_tool_calls,
        "max_tool_calls": request.max_tool_calls,
        "metadata": request.metadata or {},
        "temperature": request.temperature if request.temperature is not None else 1.0,
        "top_p": request.top_p if request.top_p is not None else 1.0,
        "max_output_tokens": request.max_output_tokens,
        "previous_response_id": request.previous_response_id,
        "conversation": {"id": request.conversation} if request.conversation else None,
        "background": request.background,
        "reasoning": reasoning,
        "text": text,
        "truncation": request.truncation or "disabled",
        "user": request.user,
        "safety_identifier": request.safety_identifier,
        "prompt_cache_key": request.prompt_cache_key,
        "prompt_cache_retention": request.prompt_cache_retention,
        # One tier is served; OpenAI echoes the tier that served the request (asked for or not).
        "service_tier": "default",
        "top_logprobs": request.top_logprobs or 0,
        "store": request.store,
    }


def _echoed_tool_choice(choice: Any) -> Any:
    # openai's ToolChoiceTypes has no web_search member, though the Agents SDK sends
    # {"type": "web_search"} for tool_choice="web_search"; the echo names the same tool by the
    # older type it has.
    if isinstance(choice, dict) and choice.get("type") in TOOL_TYPES and choice["type"] not in _HOSTED_CHOICE_TYPES:
        return {"type": "web_search_preview"}
    return choice


_HOSTED_CHOICE_TYPES = frozenset(get_args(ToolChoiceTypes.model_fields["type"].annotation))


def _response(fields: dict[str, Any]) -> Response:
    try:
        return Response.model_validate(fields)
    except ValidationError as exc:
        # The request model accepts some fields loosely (tool_choice, text.format); the Response
        # type is the stricter judge of what can be echoed.
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"] if _FIELD.fullmatch(str(p))) or None
        raise BadRequest(f"Invalid value for '{param}': {first['msg']}", param=param, code="invalid_value") from exc


def build_queued(
    request: CreateResponseRequest,
    settings: Settings,
    plan: ConversationPlan | None = None,
    conversation_through: int | None = None,
) -> QueuedResponse:
    """``conversation_through``: the request's conversation ends at that position (``api/conversations.py``)."""
    stored_request = wire_json(request, exclude_none=True)
    tools, secrets = split_secrets(stored_request.get("tools", []))
    stored_request["tools"] = tools
    fields = _echo(request, tools, settings) | {
        "id": response_id(),
        "created_at": int(time.time()),
        # A background response waits in the queue; OpenAI starts any other in_progress.
        "status": "queued" if request.background else "in_progress",
        "output": [],
        "error": None,
        "incomplete_details": None,
        "usage": None,
    }
    return QueuedResponse(
        response=_response(fields),
        request=stored_request,
        input_items=stored_items(request.input_items()),
        secrets=secrets,
        input_messages=plan.new_messages if plan else [],
        function_calls=plan.function_calls if plan else {},
        conversation_through=conversation_through,
    )
