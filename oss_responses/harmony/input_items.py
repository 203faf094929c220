"""Responses input items → harmony message dicts (the turn's new messages, stored for replay).

One converter per item type. Function-call outputs are addressed to ``functions.NAME``, the name
found from the call_id among this turn's items and the earlier turns' calls; an unknown call_id is a
400. MCP calls given back as input replay as the call plus the tool's answer; a ``web_search_call``
as the browser call of its action plus a tool message saying its result is not there (the item holds none);
a ``code_interpreter_call`` as the python call of its code plus its outputs' logs (or the same note
when it came without them). An
``mcp_approval_request`` given as input (a client keeping its own history) replays as the pending
call message, unless a stored turn already holds it; ``mcp_list_tools`` items add no message (render
shows their tools in the developer message) and ``mcp_approval_response`` items add none either: the
answer becomes the tool message the translator writes (``open_approved_call`` / ``decline_call``).
A reasoning item with ``encrypted_content`` replays the messages sealed in it, exactly (its analysis
message, after any the turn showed in no item; its ``content``/``summary`` are then ignored); a
``compaction`` item replays the summary message sealed in it (see ``compaction.py``); a blob that does
not open is a 400 naming it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

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
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListTools,
    Message,
)
from pydantic import BaseModel

from oss_responses.errors import BadRequest
from oss_responses.harmony.builtin_tools import BROWSER, BUILTIN_CALL_CHANNEL, PYTHON
from oss_responses.harmony.messages import (
    Recipient,
    declined_message,
    function_recipient,
    qualified_function_name,
    text_message,
    tool_result_message,
)

# Opens an ``encrypted_content`` blob of a kind ("reasoning" | "compaction") into the harmony messages
# sealed in it; None if it does not open.
Unseal = Callable[[Literal["reasoning", "compaction"], str], list[dict[str, Any]] | None]

RESULT_NOT_KEPT = "(The result of this call is not in the conversation.)"
FUNCTION_ARGUMENTS_TYPE = "<|constrain|>json"  # what gpt-oss writes in a function (or MCP tool) call's header
_ROLES = {"user": "user", "assistant": "assistant", "system": "developer", "developer": "developer"}


# Each input item type's converter, by method name: a per-instance dict of bound methods made every converter
# a reference cycle (it, its dict, its methods), which only the cyclic garbage collector frees.
_CONVERTERS: dict[type[BaseModel], str] = {
    EasyInputMessage: "_message",
    Message: "_message",
    ResponseOutputMessage: "_output_message",
    ResponseReasoningItem: "_reasoning",
    ResponseFunctionToolCall: "_function_call",
    FunctionCallOutput: "_function_call_output",
    McpCall: "_mcp_call",
    ResponseFunctionWebSearch: "_web_search_call",
    ResponseCodeInterpreterToolCall: "_code_interpreter_call",
    McpListTools: "_listed_tools",
    McpApprovalRequest: "_approval_request",
    McpApprovalResponse: "_approval_response",
    ResponseCompactionItemParam: "_compaction",
}


class InputConverter:
    """Converts one request's input items, remembering the function calls it has seen."""

    def __init__(
        self,
        known_calls: Mapping[str, str],
        namespaces: Mapping[str, str],
        builtin_namespaces: frozenset[str],
        stored_approvals: frozenset[str] = frozenset(),
        unseal: Unseal | None = None,
    ):
        self.function_calls: dict[str, str] = {}
        self._unseal = unseal  # None: no key configured, sealed items cannot be opened
        self._known_calls = known_calls
        self._stored_approvals = stored_approvals  # approval request ids whose call message is stored
        self._namespaces = namespaces  # MCP server_label -> harmony namespace
        self._builtin_namespaces = builtin_namespaces
        self._approval_calls: dict[str, dict[str, Any]] = {}  # approval request id -> its call message
        self._live_answer: BaseModel | None = None

    def convert(self, items: list[BaseModel], *, live_answer: bool = True) -> list[dict[str, Any]]:
        """``live_answer``: a last ``mcp_approval_response`` answers the pending call now (the translator
        writes its answer); any other one is history, settled in the items after it."""
        self._live_answer = items[-1] if live_answer and items and isinstance(items[-1], McpApprovalResponse) else None
        messages: list[dict[str, Any]] = []
        for index, item in enumerate(items):
            converter = _CONVERTERS.get(type(item))
            param = f"input[{index}]"
            if converter is None:
                raise BadRequest(
                    f"Invalid value for '{param}.type': '{getattr(item, 'type', '?')}' items are not supported here.",
                    param=f"{param}.type",
                    code="unsupported_value",
                )
            messages.extend(getattr(self, converter)(item, param))
        return messages

    def _message(self, item: Any, param: str) -> list[dict[str, Any]]:
        role = _ROLES.get(item.role, "user")
        text = _text_of(item.content, param)
        return [text_message(role, text, channel="final" if role == "assistant" else None)]

    def _output_message(self, item: ResponseOutputMessage, param: str) -> list[dict[str, Any]]:
        text = "".join(str(getattr(part, "text", None) or getattr(part, "refusal", "")) for part in item.content)
        channel = "commentary" if item.phase == "commentary" else "final"
        return [text_message("assistant", text, channel=channel)]

    def _reasoning(self, item: ResponseReasoningItem, param: str) -> list[dict[str, Any]]:
        if item.encrypted_content is not None:
            return open_sealed("reasoning", item.encrypted_content, self._unseal, f"{param}.encrypted_content")
        parts = item.content or item.summary
        return [text_message("assistant", "".join(part.text for part in parts), channel="analysis")]

    def _compaction(self, item: ResponseCompactionItemParam, param: str) -> list[dict[str, Any]]:
        return open_sealed("compaction", item.encrypted_content, self._unseal, f"{param}.encrypted_content")

    def _function_call(self, item: ResponseFunctionToolCall, param: str) -> list[dict[str, Any]]:
        name = qualified_function_name(item.namespace, item.name)
        self.function_calls[item.call_id] = name
        recipient = function_recipient(name)
        return [
            text_message(
                "assistant", item.arguments, channel="commentary", recipient=recipient,
                content_type=FUNCTION_ARGUMENTS_TYPE,
            )
        ]

    def _function_call_output(self, item: FunctionCallOutput, param: str) -> list[dict[str, Any]]:
        name = self.function_calls.get(item.call_id or "") or self._known_calls.get(item.call_id or "")
        if name is None:
            raise UnknownCallId(item.call_id or "", f"{param}.call_id")
        return [tool_result_message(function_recipient(name), tool_output_text(item.output), "commentary")]

    def _mcp_call(self, item: McpCall, param: str) -> list[dict[str, Any]]:
        call = self._mcp_call_message(item.server_label, item.name, item.arguments)
        result = tool_result_message(call["recipient"], item.output if item.output is not None else
                                     _error_text(item.error), call["channel"])
        approved = item.approval_request_id
        # An approved call: its approval request already gave the call message (here or in a stored turn).
        if approved is not None and (approved in self._approval_calls or approved in self._stored_approvals):
            return [result]
        return [call, result]

    def _web_search_call(self, item: ResponseFunctionWebSearch, param: str) -> list[dict[str, Any]]:
        """The browser call the item's action stands for, and a tool message saying its result is not
        here: the item carries none (the stored turn, continued by previous_response_id, has it)."""
        name, arguments = browser_call_of(item.action)
        recipient = Recipient.address(BROWSER, name)
        call = text_message("assistant", arguments, channel=BUILTIN_CALL_CHANNEL, recipient=recipient)
        return [call, tool_result_message(recipient, RESULT_NOT_KEPT, BUILTIN_CALL_CHANNEL)]

    def _code_interpreter_call(self, item: ResponseCodeInterpreterToolCall, param: str) -> list[dict[str, Any]]:
        """The python call of the item's code, and its outputs as the tool's answer (logs as written, an
        image by its URL); without outputs, a note that they are not here: ``include`` did not ask for
        them (the JavaScript Agents SDK sends such an item back with ``outputs: []``)."""
        call = text_message("assistant", item.code or "", channel=BUILTIN_CALL_CHANNEL, recipient=PYTHON)
        if not item.outputs:
            result = RESULT_NOT_KEPT
        else:
            result = "\n".join(out.logs if out.type == "logs" else f"(image: {out.url})" for out in item.outputs)
        return [call, tool_result_message(PYTHON, result, BUILTIN_CALL_CHANNEL)]

    def _listed_tools(self, item: McpListTools, param: str) -> list[dict[str, Any]]:
        return []  # its tools are rendered in the developer message

    def _approval_request(self, item: McpApprovalRequest, param: str) -> list[dict[str, Any]]:
        call = self._approval_calls[item.id] = self._mcp_call_message(item.server_label, item.name, item.arguments)
        return [] if item.id in self._stored_approvals else [call]

    def _approval_response(self, item: McpApprovalResponse, param: str) -> list[dict[str, Any]]:
        """A settled answer (a client resending its whole conversation): an approval adds nothing (the
        ``mcp_call`` after it holds the result), a refusal the message the model read then."""
        call = self._approval_calls.get(item.approval_request_id)
        if item is self._live_answer or item.approve or call is None:
            return []
        return [declined_message(call["recipient"], item.reason, call.get("channel"))]

    def _mcp_call_message(self, server_label: str, name: str, arguments: str) -> dict[str, Any]:
        """The assistant's call as gpt-oss writes it: built-ins on analysis, MCP namespaces as JSON."""
        namespace = self._namespaces.get(server_label, server_label)
        recipient = Recipient.address(namespace, name)
        if namespace in self._builtin_namespaces:
            return text_message("assistant", arguments, channel=BUILTIN_CALL_CHANNEL, recipient=recipient)
        return text_message(
            "assistant", arguments, channel="commentary", recipient=recipient, content_type=FUNCTION_ARGUMENTS_TYPE
        )


def browser_call_of(action: Any) -> tuple[str, str]:
    """A ``web_search_call`` action as the browser call the model would write: (action, JSON arguments)."""
    if action.type == "open_page":
        return "open", json.dumps({"id": action.url} if action.url else {})
    if action.type == "find_in_page":
        return "find", json.dumps({"pattern": action.pattern})
    return "search", json.dumps({"query": action.query or " ".join(action.queries or [])})


class UnknownCallId(BadRequest):
    """A ``function_call_output`` answering no call: OpenAI's words, and its ``param`` (``input``, not
    the item's field); ``item_param`` keeps where it stands, for a conversation's own 400 naming the
    added item."""

    def __init__(self, call_id: str, item_param: str) -> None:
        super().__init__(f"No tool call found for function call output with call_id {call_id}.", param="input")
        self.item_param = item_param


def open_sealed(
    kind: Literal["reasoning", "compaction"], blob: str, unseal: Unseal | None, param: str
) -> list[dict[str, Any]]:
    """The sealed harmony messages, exactly as this server sealed them; a 400 naming ``param`` if not ours."""
    if unseal is None:
        raise BadRequest(
            f"Invalid value for '{param}': this server has no encryption keys configured "
            "(OSS_RESPONSES_ENCRYPTION_KEYS), so it cannot open encrypted content.",
            param=param,
            code="invalid_encrypted_content",
        )
    messages = unseal(kind, blob)
    if messages is None:
        raise BadRequest(
            f"Invalid value for '{param}': the encrypted content could not be verified; it was not produced "
            "by this server's keys or it was modified.",
            param=param,
            code="invalid_encrypted_content",
        )
    return messages


def _text_of(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for index, part in enumerate(content):
        text = getattr(part, "text", None)
        if text is None:
            raise BadRequest(
                f"Invalid value for '{param}.content[{index}]': only text content is supported by gpt-oss.",
                param=f"{param}.content[{index}]",
                code="unsupported_value",
            )
        texts.append(text)
    return "".join(texts)


def tool_output_text(output: Any) -> str:
    """A function's output as the model reads it. An image or file part becomes a note saying so: the
    model chose to call the tool (Codex CLI offers ``view_image``), and refusing its result would
    leave a client that replays its history unable to send any later turn."""
    if isinstance(output, str):
        return output
    return "".join(_tool_output_part(part) for part in output)


def _tool_output_part(part: Any) -> str:
    if part.type == "input_text":
        return str(part.text)
    if part.type == "input_file":
        return f"[file {json.dumps(part.filename or '')} not shown: gpt-oss reads text only]"
    return "[image not shown: gpt-oss reads text only]"


def _error_text(error: Any) -> str:
    """An ``mcp_call``'s error as the text the model reads (a tool result), never a Python repr."""
    if error is None:
        return ""
    if isinstance(error, str):
        return error
    message = getattr(error, "message", None)
    if message is not None:
        return str(message)
    return _content_text(getattr(error, "content", None))


def _content_text(content: Any) -> str:
    """MCP result content (a string, a text part, a list of parts) as plain text; other shapes as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict) and isinstance(text := content.get("text"), str):
        return text
    if isinstance(content, list) and content:
        return "\n".join(_content_text(part) for part in content)
    return json.dumps(content, ensure_ascii=False, default=str)
