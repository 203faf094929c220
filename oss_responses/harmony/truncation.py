"""``truncation: "auto"``: a prompt longer than the model's context loses its earliest messages.

OpenAI's rule: "If the input to this Response exceeds the model's context window size, the model will
truncate the response to fit the context window by dropping items from the beginning of the
conversation." Here the conversation (earlier turns, a conversation's items and the input, after the
system and developer messages, which always stay) is cut at a user message, the earliest one from which
the prompt fits, so that what the model reads begins where the user spoke.

The current question is never cut. When the prompt does not fit even from the last user message on (an
agent's loop of tool calls after one question, as the Agents SDK runs it), the tool steps after that
question go next, earliest first: a step is the assistant's messages up to a tool's result and that
result, so no result is kept without its call. What stays is the question and the latest steps. When even
the question and the last step leave the answer less than its room, that is what the prompt keeps: the
answer has what room is left, and if there is none the engine refuses the prompt as too long
(``truncation: "disabled"``'s error).

A response's own loop of hosted tool calls (run by the worker, within one response) is cut the same way
as its context grows: its earliest steps go, whole (``steps_to_drop``).

The prompt's tokens are every message's rendering in turn, each beginning with ``<|start|>``, which no
text encodes to: so a message's tokens are found in the rendered prompt, with no second rendering.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from openai_harmony import Message, Role

T = TypeVar("T")

START_TOKEN = 200006  # <|start|>: the first token of every message


@dataclass(frozen=True, slots=True)
class Cut:
    """What a prompt keeps of its conversation: the message at ``pinned`` (the last user message, once the
    cut has passed it), then every message from ``resume`` on."""

    resume: int = 0
    pinned: int | None = None

    def kept(self, conversation: Sequence[T]) -> list[T]:
        head = [conversation[self.pinned]] if self.pinned is not None else []
        return [*head, *conversation[self.resume:]]


WHOLE = Cut()


def context_budget(context_tokens: int, max_output_tokens: int) -> int:
    """The most tokens a prompt may hold under ``truncation: "auto"``: the rest of the model's context is
    the answer's room, ``max_output_tokens`` but at most half the context."""
    return context_tokens - min(max_output_tokens, context_tokens // 2)


def truncation_cut(
    messages: Sequence[Message], conversation_start: int, token_ids: Sequence[int], budget: int
) -> Cut | None:
    """The cut of the conversation (``messages[conversation_start:]``) that leaves the prompt ``token_ids``
    (the rendering of ``messages``) at most ``budget`` tokens, dropping as little as it can: ``WHOLE`` if it
    fits; the deepest cut (the last user message, and the last tool step after it) if none does; None if
    there is nothing to cut."""
    if len(token_ids) <= budget:
        return WHOLE
    starts = [index for index, token in enumerate(token_ids) if token == START_TOKEN]
    if len(starts) < len(messages):  # not the rendering of these messages: leave it to the engine
        return None
    conversation = messages[conversation_start:]
    # Where each conversation message's tokens begin, and where the last one's end.
    bounds = [*starts[conversation_start:len(messages)], len(token_ids)]
    deepest = None
    for cut in _cuts(conversation):
        dropped = bounds[cut.resume] - bounds[0]
        if cut.pinned is not None:  # the pinned question is kept from the dropped span
            dropped -= bounds[cut.pinned + 1] - bounds[cut.pinned]
        if len(token_ids) - dropped <= budget:
            return cut
        deepest = cut
    return deepest


def _cuts(conversation: Sequence[Message]) -> Iterator[Cut]:
    """Every cut, dropping less before more: at each user message, then at each tool step after the last."""
    users = [index for index, message in enumerate(conversation) if message.author.role == Role.USER]
    yield from (Cut(index) for index in users)
    if not users:
        return
    question = users[-1]
    for index in range(question + 2, len(conversation)):
        if conversation[index - 1].author.role == Role.TOOL and conversation[index].author.role == Role.ASSISTANT:
            yield Cut(index, pinned=question)


def last_start(token_ids: Sequence[int]) -> int | None:
    """Where the last message of ``token_ids`` begins (found from the end: a context ends with an open
    ``<|start|>assistant``)."""
    for index in range(len(token_ids) - 1, -1, -1):
        if token_ids[index] == START_TOKEN:
            return index
    return None


def steps_to_drop(boundaries: Sequence[int], length: int, budget: int) -> int:
    """A response's own tool loop (hosted tools run by the worker) in a context of ``length`` tokens:
    ``boundaries`` are where each of its steps begins (the assistant's messages up to a tool's result,
    and that result), the last where the assistant's next message begins. How many of the earliest
    steps must go for the context to be at most ``budget`` tokens: 0 when it fits; all but the latest
    step when fewer would not do."""
    if length <= budget:
        return 0
    deepest = max(0, len(boundaries) - 2)
    for count in range(1, deepest):
        if length - (boundaries[count] - boundaries[0]) <= budget:
            return count
    return deepest
