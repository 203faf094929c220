"""What the API checks about sealed content before it stores a request.

``include: ["reasoning.encrypted_content"]`` needs encryption keys: without them it is a 400 naming
``include`` and the setting, instead of a response whose reasoning cannot be replayed. (Sealed input
items are opened when the API plans the conversation, ``jobs.check_conversation``: a tampered or
foreign blob is a 400 naming ``input[i].encrypted_content`` there.)

An MCP tool's ``authorization`` or ``headers`` are kept sealed beside the response (never in clear in
SQL, Redis or a task), so that any worker that runs or takes over the response can use them: without
keys they are a 400 naming the field.

``GET /v1/responses/{id}`` takes ``include`` too, checked as a create's is: with
``reasoning.encrypted_content`` its reasoning items carry sealed what the same turn created with ``include``
carries: the stored messages of the turn (``output_messages``) that the worker's plan names
(``ResponseTranslator.sealing_plan``, kept in the row's ``state``): each reasoning item's analysis message
after any message no item shows (a call to a tool not offered, its error), and, where no reasoning item
follows such messages, a reasoning item of their own, added where that turn has it. A row stored before the
plan was kept has each reasoning item seal its own message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Any

from openai.types.responses import ResponseReasoningItem
from openai.types.responses.tool import Mcp

from oss_responses.errors import BadRequest
from oss_responses.harmony.messages import text_message
from oss_responses.request_include import REASONING_ENCRYPTED_CONTENT
from oss_responses.requests import CreateResponseRequest
from oss_responses.sealing import Sealer
from oss_responses.storage.records import SEALING_PLAN, ResponseRecord
from oss_responses.wire import item_on_the_wire, wire_json


def check_include(request: CreateResponseRequest, sealer: Sealer | None) -> None:
    check_included(request.include or (), sealer)


def check_included(include: Collection[str], sealer: Sealer | None) -> None:
    """A create's or a retrieve's ``include``: what it asks for needs keys this server has."""
    if sealer is None and REASONING_ENCRYPTED_CONTENT in include:
        raise BadRequest(
            f"'{REASONING_ENCRYPTED_CONTENT}' needs encryption keys on this server: set "
            "OSS_RESPONSES_ENCRYPTION_KEYS (a JSON list of keys) on the API and the workers.",
            param="include",
            code="unsupported_value",
        )


def check_mcp_credentials(request: CreateResponseRequest, sealer: Sealer | None) -> None:
    if sealer is not None:
        return
    for index, tool in enumerate(request.tools):
        for field in ("authorization", "headers"):
            if isinstance(tool, Mcp) and getattr(tool, field):
                raise BadRequest(
                    f"MCP credentials ('{field}') are kept sealed and need encryption keys on this server: set "
                    "OSS_RESPONSES_ENCRYPTION_KEYS (a JSON list of keys) on the API and the workers.",
                    param=f"tools[{index}].{field}",
                    code="unsupported_value",
                )


def with_included(body: dict[str, Any], record: ResponseRecord, include: Collection[str],
                  sealer: Sealer | None) -> dict[str, Any]:
    """A stored response's JSON as retrieved with ``include`` (checked by ``check_included``): with
    ``reasoning.encrypted_content``, each reasoning item without it gets it, sealed for the response's
    owner, as the turn's sealing plan says (and the items of their own it names are added). Other values
    change nothing: the items are as the response's own ``include`` made them."""
    if sealer is None or REASONING_ENCRYPTED_CONTENT not in include or not body.get("output"):
        return body
    plan = (record.state or {}).get(SEALING_PLAN)
    if isinstance(plan, list):
        return {**body, "output": _sealed_by_plan(body["output"], record, plan, sealer)}
    messages = [message for message in record.output_messages if _is_reasoning(message)]
    output = []
    for item in body["output"]:
        if isinstance(item, dict) and item.get("type") == "reasoning" and item.get("encrypted_content") is None:
            sealed = sealer.seal("reasoning", [_reasoning_message(item, messages)], record.owner)
            item = {**item, "encrypted_content": sealed}
        output.append(item)
    return {**body, "output": output}


def _is_reasoning(message: dict[str, Any]) -> bool:
    """A harmony message that is a reasoning item: the assistant's, on ``analysis``, to nobody."""
    return message.get("role") == "assistant" and message.get("channel") == "analysis" and not message.get("recipient")


def _text(parts: Any) -> str:
    return "".join(part.get("text", "") for part in parts or () if isinstance(part, dict))


def _reasoning_message(item: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The stored message ``item`` stands for (the first of ``messages`` with its text, taken from them):
    the one the worker seals, so that a replay renders the same tokens. One not found (a row stored
    otherwise) is the message the worker would have stored for that text."""
    text = _text(item.get("content"))
    for index, message in enumerate(messages):
        if _text(message.get("content")) == text:
            return messages.pop(index)
    return text_message("assistant", text, channel="analysis")


def _sealed_by_plan(output: list[Any], record: ResponseRecord, plan: list[dict[str, Any]],
                    sealer: Sealer) -> list[Any]:
    """``output`` with each span of the worker's plan sealed: into its reasoning item (unless the turn sealed
    it already), or into a reasoning item of their own inserted before the item the plan names."""
    sealed = list(output)

    def seal(span: dict[str, Any]) -> str:
        return sealer.seal("reasoning", [record.output_messages[index] for index in span["messages"]], record.owner)

    for span in plan:
        if "item" in span:
            position = _position(sealed, span["item"])
            if position is not None and sealed[position].get("encrypted_content") is None:
                sealed[position] = {**sealed[position], "encrypted_content": seal(span)}
        else:
            before = _position(sealed, span["before"])
            carrier = _carrier(record.id, span["messages"][0], seal(span))
            sealed.insert(len(sealed) if before is None else before, carrier)
    return sealed


def _position(output: list[Any], item_id: str | None) -> int | None:
    return next((index for index, item in enumerate(output)
                 if item_id is not None and isinstance(item, dict) and item.get("id") == item_id), None)


def _carrier(response_id: str, first_message: int, blob: str) -> dict[str, Any]:
    """The reasoning item that carries messages no item shows, as the translator makes it with ``seal``
    (``SealedMessagesBuilder``), named reproducibly: the same id at every retrieve, and none of the turn's.
    Named by the first message it carries, not by the item it stands before: two carriers can stand before
    the same one (calls written past, nothing shown between them), and an id twice made a replay a 400."""
    digest = hashlib.sha256(f"{response_id}:sealed-from:{first_message}".encode()).hexdigest()
    item = ResponseReasoningItem(type="reasoning", id=f"rs_{digest[:48]}", summary=[], content=[],
                                 encrypted_content=blob, status="completed")
    return item_on_the_wire(wire_json(item))
