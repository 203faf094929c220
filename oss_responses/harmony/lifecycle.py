"""Response-level events and snapshots: created / queued / in_progress and the terminal events.

``opening_events(response)`` is what the API emits when it accepts a request (sequence 0, and 1 for
background requests); the worker's :class:`~oss_responses.harmony.translator.ResponseTranslator`
continues from there.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseError,
    ResponseFailedEvent,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseQueuedEvent,
    ResponseStreamEvent,
    ResponseUsage,
)
from openai.types.responses.response import IncompleteDetails
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import BaseModel

from oss_responses.harmony.emitter import EventEmitter
from oss_responses.statuses import TerminalStatus

TerminalEvent = ResponseCompletedEvent | ResponseIncompleteEvent | ResponseFailedEvent
_TERMINAL_EVENTS: dict[str, type[TerminalEvent]] = {
    "completed": ResponseCompletedEvent,
    "incomplete": ResponseIncompleteEvent,
    "failed": ResponseFailedEvent,
}


def placeholder_response(response_id: str, model: str, created_at: float, *, background: bool = False) -> Response:
    """The least ``Response`` there can be: for failing a response whose stored JSON cannot be read."""
    return Response.model_validate(
        {
            "id": response_id,
            "object": "response",
            "created_at": created_at,
            "status": "in_progress",
            "model": model,
            "output": [],
            "tools": [],
            "tool_choice": "auto",
            "parallel_tool_calls": True,
            "background": background,
        }
    )


def opening_events(response: Response) -> list[ResponseStreamEvent]:
    """``response.created`` (sequence 0) and, for background responses, ``response.queued`` (1)."""
    emitter = EventEmitter(0)
    emitter.emit(ResponseCreatedEvent, response=response)
    if response.background:
        emitter.emit(ResponseQueuedEvent, response=response)
    return emitter.drain()


def emit_in_progress(emitter: EventEmitter, response: Response) -> Response:
    snapshot = response.model_copy(update={"status": "in_progress", "output": []})
    emitter.emit(ResponseInProgressEvent, response=snapshot)
    return snapshot


# Codes OpenAI's server puts in a failed response's error that openai's ``ResponseError`` does not list
# (its Literal lags the API; openai-python parses any value). Clients key on them: Codex CLI takes a
# ``response.failed`` with ``context_length_exceeded`` for a full context (it marks its context full,
# compacts, drops history in its own compaction, does not retry) and any other code there for a passing
# stream error. Such an error is built unvalidated; everything around it is still validated.
CODES_BEYOND_TYPES = frozenset({"context_length_exceeded"})


def response_error(code: str, message: str) -> ResponseError:
    """A failed response's ``error``, its ``type`` named as OpenAI's errors name theirs: clients read it
    (the Vercel AI SDK refuses a Response whose error has no ``type``, and reports "Invalid JSON response"
    instead of the message)."""
    kind = "server_error" if code == "server_error" else "invalid_request_error"
    if code in CODES_BEYOND_TYPES:
        return ResponseError.model_construct(code=code, message=message, type=kind)  # type: ignore[arg-type]
    return ResponseError(code=code, message=message, type=kind)


def validate_response(data: Mapping[str, Any]) -> Response:
    """A stored Response, validated; an error whose code is one of :data:`CODES_BEYOND_TYPES` kept as is."""
    error = data.get("error")
    if not isinstance(error, Mapping) or error.get("code") not in CODES_BEYOND_TYPES:
        return Response.model_validate(data)
    response = Response.model_validate({**data, "error": None})
    checked = ResponseError.model_validate({**error, "code": "invalid_prompt"})  # all but the code
    return response.model_copy(update={"error": checked.model_copy(update={"code": error["code"]})})


def usage(input_tokens: int, cached_tokens: int | None, output_tokens: int, reasoning_tokens: int) -> ResponseUsage:
    # An engine counts the cache over all it was given: a forced call's header (output) follows the prompt.
    cached = min(cached_tokens or 0, input_tokens)
    return ResponseUsage(
        input_tokens=input_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=cached, cache_write_tokens=0),
        output_tokens=output_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning_tokens),
        total_tokens=input_tokens + output_tokens,
    )


def terminal_response(
    response: Response,
    status: TerminalStatus,
    output: Sequence[BaseModel],
    response_usage: ResponseUsage,
    *,
    error: ResponseError | None = None,
    completed_at: int | None = None,
) -> Response:
    update: dict[str, Any] = {"status": status, "output": list(output), "usage": response_usage, "error": error}
    if status == "completed":
        # OpenAI's timestamps are whole seconds. Never before ``created_at``: the API that stamped that and
        # the worker that ends the response read different hosts' clocks, and a client subtracts the two.
        ended = int(time.time()) if completed_at is None else completed_at
        update["completed_at"] = max(ended, int(response.created_at))
    if status == "incomplete":
        update["incomplete_details"] = IncompleteDetails(reason="max_output_tokens")
    return response.model_copy(update=update)


def emit_terminal(emitter: EventEmitter, response: Response) -> None:
    """The one terminal event; a cancelled response has none (OpenAI defines no such event)."""
    terminal = _TERMINAL_EVENTS.get(response.status or "")
    if terminal is not None:
        emitter.emit(terminal, response=response)
