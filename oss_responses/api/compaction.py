"""``POST /v1/responses/compact``: a conversation summarised by the model into one sealed item.

The summary is generated through the normal worker path, so it works on every engine: an internal
response (``store: false``, no tools) whose input is the conversation (``input`` and/or
``previous_response_id``) followed by a user message asking for a summary (:data:`SUMMARY_REQUEST`),
accepted and waited for as a non-stream POST is. Its final answer is the summary.

The compaction item's ``encrypted_content`` is the harmony message a later request renders where the
item stands: a *user* message ``SUMMARY_HEADING + summary``, sealed under the same keys as reasoning
(kind ``compaction``). A user message, not a developer one, because the summary is made of user and
tool content and must not gain a developer message's authority over the model.

The returned ``output`` is the conversation's user messages (the earlier turns' by
``previous_response_id``, then the input's) followed by the compaction item; ``usage`` is the
summarising response's. openai's ``CompactedResponse.output`` union has no user-message member
(though its docstring says it holds them), so the user messages are validated as
``ResponseInputMessageItem`` and the rest as ``CompactedResponse``.
"""

from __future__ import annotations

import time
from typing import Any

from openai.types.responses import (
    CompactedResponse,
    EasyInputMessage,
    ResponseCompactionItem,
    ResponseInputMessageItem,
)

from oss_responses.api.items import stored_items
from oss_responses.conversation import ConversationPrefix
from oss_responses.errors import BadRequest, ServiceError
from oss_responses.harmony.ids import new_id
from oss_responses.harmony.messages import text_message
from oss_responses.requests import CreateResponseRequest, parse_create_request
from oss_responses.sealing import Sealer
from oss_responses.storage import ResponseRecord

# Fields of the compact request that matter; clients also send their create request's other fields
# here (tools, reasoning, ...), which change nothing about a summary and are ignored.
COMPACT_FIELDS = ("model", "input", "instructions", "previous_response_id", "prompt_cache_key")

SUMMARY_REQUEST = (
    "Summarize the conversation so far for a continuation of it that will not see it: the user's goals "
    "and requests, the decisions taken, the results of tool calls, and what remains to be done. "
    "Write only the summary."
)
SUMMARY_HEADING = "Summary of the earlier conversation (it was compacted):\n\n"


def parse_compact_request(body: Any) -> CreateResponseRequest:
    """The compact body as a create request (same validation, same error params)."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    return parse_create_request({key: body[key] for key in COMPACT_FIELDS if key in body})


def require_sealer(sealer: Sealer | None) -> Sealer:
    if sealer is None:
        raise BadRequest(
            "Compaction needs encryption keys on this server: set OSS_RESPONSES_ENCRYPTION_KEYS "
            "(a JSON list of keys) on the API and the workers."
        )
    return sealer


def summarising_request(request: CreateResponseRequest) -> CreateResponseRequest:
    """The internal response that writes the summary: the conversation, then the summary request."""
    ask = EasyInputMessage(type="message", role="user", content=SUMMARY_REQUEST)
    return request.model_copy(
        update={"input": [*request.input_items(), ask], "store": False, "stream": False, "background": False,
                "tool_choice": "none", "tools": []}
    )


def user_messages(
    chain: list[ResponseRecord], request: CreateResponseRequest, prefix: ConversationPrefix | None = None
) -> list[dict[str, Any]]:
    """The conversation's user messages, oldest first, as input message items (``prefix``: the items of the
    conversation the chain began in come first)."""
    items = list(prefix.items) if prefix is not None else []
    items += [item for record in chain for item in stored_items(parse_create_request(record.request).input_items())]
    items += stored_items(request.input_items())
    return [
        ResponseInputMessageItem.model_validate(item).model_dump(mode="json", exclude_none=True)
        for item in items
        if item.get("type") == "message" and item.get("role") == "user"
    ]


def compacted(
    final: dict[str, Any], users: list[dict[str, Any]], sealer: Sealer, owner: str | None
) -> dict[str, Any]:
    """The ``response.compaction`` object from the summarising response's final JSON."""
    summary = _summary_text(final)
    sealed = sealer.seal("compaction", [text_message("user", SUMMARY_HEADING + summary)], owner)
    item = ResponseCompactionItem(id=new_id("cmp"), type="compaction", encrypted_content=sealed)
    body = CompactedResponse(
        id=new_id("resp"), object="response.compaction", created_at=int(time.time()), output=[item],
        usage=final["usage"],
    ).model_dump(mode="json", exclude_none=True)
    body["output"] = users + body["output"]
    return body


def _summary_text(final: dict[str, Any]) -> str:
    error = final.get("error") or {}
    if error.get("code") == "context_length_exceeded":  # the client's input, not the service: OpenAI's 400
        raise BadRequest(error.get("message", ""), param="input", code="context_length_exceeded")
    if final.get("status") != "completed":
        reason = error.get("message") or final.get("status")
        raise ServiceError(f"The conversation could not be compacted: the summary did not complete ({reason}).")
    texts = [
        part.get("text", "")
        for item in final.get("output", [])
        if item.get("type") == "message" and item.get("phase") != "commentary"  # preambles are no summary
        for part in item.get("content", [])
        if part.get("type") == "output_text"
    ]
    summary = "".join(texts).strip()
    if not summary:
        raise ServiceError("The conversation could not be compacted: the model wrote no summary.")
    return summary
