"""Earlier turns of a conversation, and what a new turn needs to know about their MCP items.

A :class:`ConversationTurn` is one stored turn: the harmony messages it rendered and produced
(replayed verbatim), its function calls, and its Responses items (input items, then output items,
as JSON; see :func:`turn_items`). Two questions are answered from those items:

- :func:`listed_tools`: which MCP servers already have a tool list in the conversation (the worker
  lists only the others; render shows the model the stored list);
- :func:`find_approval`: which ``mcp_approval_request`` a new ``mcp_approval_response`` answers;
- :func:`unanswered_call`: a function call left without its output (OpenAI refuses to go on from it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oss_responses.errors import BadRequest
from oss_responses.harmony.mcp_tools import McpToolSpec, field_of, specs_from_item


@dataclass(slots=True)
class ConversationTurn:
    """One earlier turn as stored: its messages (input then output), function calls and items."""

    messages: list[dict[str, Any]]
    function_calls: dict[str, str] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"messages": self.messages, "function_calls": self.function_calls, "items": self.items}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConversationTurn:
        return cls(
            messages=list(data["messages"]),
            function_calls=dict(data.get("function_calls", {})),
            items=list(data.get("items", [])),
        )


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    """An ``mcp_approval_response`` joined with the request it answers.

    ``recipient`` and ``channel`` are those of the pending harmony call message; ``render_prompt``
    fills them in (``RenderedPrompt.approval``).
    """

    approval_request_id: str
    server_label: str
    name: str
    arguments: str
    approve: bool
    reason: str | None = None
    recipient: str | None = None
    channel: str | None = None


def turn_items(request_input: Any, response_output: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A stored turn's items: its request's ``input`` (a string is one user message), then its output."""
    if isinstance(request_input, str):
        inputs = [{"type": "message", "role": "user", "content": request_input}]
    else:
        inputs = list(request_input or [])
    return [dict(item) for item in inputs] + [dict(item) for item in response_output]


def listed_tools(history: Sequence[ConversationTurn], input_items: Sequence[Any] = ()) -> dict[str, list[McpToolSpec]]:
    """server_label → the latest successful tool list among the earlier turns' and this request's items."""
    lists: dict[str, list[McpToolSpec]] = {}
    for item in _all_items(history, input_items):
        if field_of(item, "type") == "mcp_list_tools" and not field_of(item, "error"):
            lists[field_of(item, "server_label")] = specs_from_item(item)
    return lists


def find_approval(history: Sequence[ConversationTurn], input_items: Sequence[Any]) -> ApprovalAnswer | None:
    """The approval request that this request's ``mcp_approval_response`` answers (None if it has none).

    The answer is the last input item: gpt-oss waits on one call at a time, and the tool's result must
    follow the call directly. Earlier answers are history a client resends (its whole conversation, as
    the Agents SDK's sessions do), settled by what follows them: a refusal by the model's answer, an
    approval by the ``mcp_call`` naming it; an approval not so settled is a 400 (it would have to run
    now). An unknown or already answered id is a 400.
    """
    answers = [i for i, item in enumerate(input_items) if field_of(item, "type") == "mcp_approval_response"]
    last = len(input_items) - 1
    for index in answers:
        if index != last and not _settled(input_items, index):
            raise BadRequest(
                f"Invalid value for 'input[{index}]': an approving mcp_approval_response must be the last input "
                "item, unless the mcp_call it approved follows it.",
                param=f"input[{index}]",
                code="invalid_value",
            )
    if not answers or answers[-1] != last:
        return None
    index = last
    param = f"input[{index}]"
    answer = input_items[index]
    request_id = field_of(answer, "approval_request_id")
    earlier = list(_all_items(history, input_items[:index]))
    if any(_answers(item, request_id) for item in earlier):
        raise BadRequest(
            f"The approval request '{request_id}' has already been answered.", param=f"{param}.approval_request_id"
        )
    for item in reversed(earlier):
        if field_of(item, "type") == "mcp_approval_request" and field_of(item, "id") == request_id:
            return ApprovalAnswer(
                approval_request_id=request_id,
                server_label=field_of(item, "server_label"),
                name=field_of(item, "name"),
                arguments=field_of(item, "arguments"),
                approve=bool(field_of(answer, "approve")),
                reason=field_of(answer, "reason"),
            )
    raise BadRequest(f"No approval request found with id '{request_id}'.", param=f"{param}.approval_request_id")


def _settled(input_items: Sequence[Any], index: int) -> bool:
    """Whether the answer at ``index`` was acted on in the items after it (see :func:`find_approval`)."""
    answer = input_items[index]
    if not field_of(answer, "approve"):
        return True
    request_id = field_of(answer, "approval_request_id")
    return any(
        field_of(item, "type") == "mcp_call" and field_of(item, "approval_request_id") == request_id
        for item in input_items[index + 1:]
    )


def stored_approval_ids(history: Sequence[ConversationTurn]) -> frozenset[str]:
    """Ids of the approval requests whose call message is already in the stored messages."""
    return frozenset(
        field_of(item, "id")
        for turn in history
        for item in turn.items
        if field_of(item, "type") == "mcp_approval_request"
    )


def _answers(item: Any, request_id: str) -> bool:
    kind = field_of(item, "type")
    return kind in ("mcp_approval_response", "mcp_call") and field_of(item, "approval_request_id") == request_id


def unanswered_call(history: Sequence[ConversationTurn], input_items: Sequence[Any]) -> str | None:
    """The first function call of the conversation with no ``function_call_output`` after it (its
    ``call_id``), None if every one has its output. A call cut short (``incomplete``) needs none."""
    open_calls: dict[str, None] = {}
    for item in _all_items(history, input_items):
        kind = field_of(item, "type")
        if kind == "function_call" and field_of(item, "status") != "incomplete":
            open_calls[str(field_of(item, "call_id"))] = None
        elif kind == "function_call_output":
            open_calls.pop(str(field_of(item, "call_id")), None)
    return next(iter(open_calls), None)


def _all_items(history: Sequence[ConversationTurn], input_items: Sequence[Any]) -> Iterator[Any]:
    for turn in history:
        yield from turn.items
    yield from input_items
