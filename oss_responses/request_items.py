"""A request's input items, validated one by one with openai's own pydantic models, dispatched on ``type``
so that an error names one model, not fifty; what a client may leave out of replayed history is filled
first (:func:`normalise_input_item`), and a part gpt-oss cannot read is refused by name.
"""

from __future__ import annotations

from typing import Any

from openai.types.responses import (
    EasyInputMessage,
    ResponseCodeInterpreterToolCall,
    ResponseCompactionItemParam,
    ResponseFunctionToolCall,
    ResponseFunctionWebSearch,
    ResponseOutputMessage,
    ResponseReasoningItem,
)
from openai.types.responses.response_input_item import (
    FunctionCallOutput,
    ItemReference,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListTools,
    Message,
)

from oss_responses.errors import BadRequest
from oss_responses.harmony.ids import new_id
from oss_responses.validation_errors import too_long, validate_one

InputItem = (
    EasyInputMessage
    | Message
    | ResponseOutputMessage
    | ResponseReasoningItem
    | ResponseFunctionToolCall
    | FunctionCallOutput
    | McpCall
    | ResponseFunctionWebSearch
    | ResponseCodeInterpreterToolCall
    | McpListTools
    | McpApprovalRequest
    | McpApprovalResponse
    | ItemReference
    | ResponseCompactionItemParam
)

_ITEM_MODELS: dict[str, type[InputItem]] = {
    "reasoning": ResponseReasoningItem,
    "function_call": ResponseFunctionToolCall,
    "function_call_output": FunctionCallOutput,
    "mcp_call": McpCall,
    "web_search_call": ResponseFunctionWebSearch,
    "code_interpreter_call": ResponseCodeInterpreterToolCall,
    "mcp_list_tools": McpListTools,
    "mcp_approval_request": McpApprovalRequest,
    "mcp_approval_response": McpApprovalResponse,
    "item_reference": ItemReference,
    "compaction": ResponseCompactionItemParam,
}


def _message_model(item: dict[str, Any]) -> type[EasyInputMessage | Message | ResponseOutputMessage]:
    """A ``type: message`` item is one of three shapes; pick by role and content."""
    content = item.get("content")
    if item.get("role") == "assistant" and "id" in item and isinstance(content, list):
        return ResponseOutputMessage
    if isinstance(content, str):
        return EasyInputMessage
    if item.get("role") in ("user", "system", "developer") and "type" in item:
        return Message
    return EasyInputMessage


_OUTPUT_PARTS = frozenset({"output_text", "refusal"})


def _is_output_content(content: Any) -> bool:
    return isinstance(content, list) and bool(content) and all(
        isinstance(part, dict) and type_of(part) in _OUTPUT_PARTS for part in content
    )


def _output_part(part: dict[str, Any]) -> dict[str, Any]:
    return {"annotations": [], **part} if part["type"] == "output_text" else part


_TEXT_PARTS = frozenset({"input_text", "output_text", "refusal"})
MAX_INPUT_TEXT = 10_485_760  # OpenAI's longest `input` string or text part, in characters
# An item's id as a client may give it. Ids are indexed: on PostgreSQL a btree entry holds at most 2,704 bytes, and
# an 8,000-character id was a 503 "database unavailable" the SDK retried. OpenAI's own ids are ~50 characters.
MAX_ITEM_ID = 256


def _check_text_parts(content: Any, param: str) -> None:
    """gpt-oss reads text only: an image, file or audio part is refused by name, not by a union error."""
    if not isinstance(content, list):
        return
    for index, part in enumerate(content):
        kind = type_of(part) if isinstance(part, dict) else None
        if kind not in _TEXT_PARTS:
            raise BadRequest(
                f"Invalid value for '{param}.content[{index}].type': {kind!r} content is not supported by gpt-oss, "
                "which reads text only.",
                param=f"{param}.content[{index}]",
                code="unsupported_value",
            )
        if isinstance(text := part.get("text"), str) and len(text) > MAX_INPUT_TEXT:
            raise too_long(f"{param}.content[{index}].text", MAX_INPUT_TEXT, len(text))


def type_of(value: dict[str, Any], default: str | None = None) -> str | None:
    """The ``type`` of an item, part or tool; anything but a string is no type (and cannot be a dict key)."""
    kind = value.get("type")
    if kind is None:  # left out, or null: the SDK's TypedDicts mark several types Optional
        kind = default
    return kind if isinstance(kind, str) else None


def normalise_input_item(item: dict[str, Any]) -> dict[str, Any]:
    """Fill what OpenAI lets a client leave out of replayed history, so one model describes each item.

    Clients replay assistant messages as ``output_text`` parts without ``id``/``status``/``annotations``
    and reasoning items without ``id``/``summary``, and an item reference may be its ``id`` alone (openai's
    ``ItemReference`` type: ``type`` optional); the filled form is what is stored.
    """
    if item.get("type") is None and set(item) <= {"id", "type"} and isinstance(item.get("id"), str):
        return {"type": "item_reference", "id": item["id"]}
    kind = type_of(item, "message")
    if kind == "message" and item.get("role") == "assistant" and _is_output_content(item.get("content")):
        content = [_output_part(part) for part in item["content"]]
        return {**item, "type": "message", "id": item.get("id") or new_id("msg"),
                "status": item.get("status") or "completed", "content": content}
    if kind == "reasoning":
        return {**item, "id": item.get("id") or new_id("rs"), "summary": item.get("summary") or []}
    return item


def parse_input_item(value: Any, param: str) -> InputItem:
    if not isinstance(value, dict):
        raise BadRequest(f"Invalid value for '{param}': expected an object.", param=param)
    if isinstance(item_id := value.get("id"), str) and len(item_id) > MAX_ITEM_ID:
        raise too_long(f"{param}.id", MAX_ITEM_ID, len(item_id))
    value = normalise_input_item(value)
    item_type = type_of(value, "message")
    if item_type == "message":
        _check_text_parts(value.get("content"), param)
        return validate_one(_message_model(value), value, param)
    model = _ITEM_MODELS.get(item_type) if item_type is not None else None
    if model is None:
        raise BadRequest(
            f"Invalid value for '{param}.type': input items of type {value.get('type')!r} "
            "are not supported by gpt-oss.",
            param=f"{param}.type",
            code="unsupported_value",
        )
    return validate_one(model, value, param)


def given_id(item: InputItem) -> str | None:
    """The id a client gave an input item: its field, or, for a message (whose openai input types have none: a
    client replays listed items with their ids), the extra field openai's models keep."""
    item_id = getattr(item, "id", None)
    if item_id is None:
        item_id = (item.model_extra or {}).get("id")
    return item_id if isinstance(item_id, str) and item_id else None


def duplicate_item(item_id: str, param: str) -> BadRequest:
    """OpenAI's 400 for an item given twice (in one input, or again after the turn that holds it)."""
    return BadRequest(f"Duplicate item found with id {item_id}. Remove duplicate items from your input and try again.",
                      param=param)


def check_unique_ids(items: list[InputItem], param: str) -> None:
    """OpenAI's 400 for an id given twice in one input: the items are stored, and listed a page at a time, by id."""
    seen: set[str] = set()
    for item_id in filter(None, map(given_id, items)):
        if item_id in seen:
            raise duplicate_item(item_id, param)
        seen.add(item_id)
