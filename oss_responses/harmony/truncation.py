"""``truncation: "auto"``: a prompt longer than the model's context loses its earliest messages.

OpenAI's rule: "If the input to this Response exceeds the model's context window size, the model will
truncate the response to fit the context window by dropping items from the beginning of the
conversation." Here the conversation (earlier turns, a conversation's items and the input, after the
system and developer messages, which always stay) is cut at a user message, the earliest one from which
the prompt fits, so that what the model reads begins where the user spoke. The current question is never
cut: when the prompt does not fit even from the last user message on, nothing is dropped and the engine
refuses the prompt as too long (``truncation: "disabled"``'s error).

The prompt's tokens are every message's rendering in turn, each beginning with ``<|start|>``, which no
text encodes to: so a message's tokens are found in the rendered prompt, with no second rendering.
"""

from __future__ import annotations

from collections.abc import Sequence

from openai_harmony import Message, Role


def truncation_start(
    messages: Sequence[Message], conversation_start: int, token_ids: Sequence[int], start_token: int, budget: int
) -> int | None:
    """Where the conversation must begin (an index into ``messages[conversation_start:]``) for the prompt
    ``token_ids`` (the rendering of ``messages``) to be at most ``budget`` tokens: 0 if it fits whole;
    None if it does not fit even from the last user message on."""
    if len(token_ids) <= budget:
        return 0
    starts = [index for index, token in enumerate(token_ids) if token == start_token]
    if len(starts) < len(messages):  # not the rendering of these messages: leave it to the engine
        return None
    first = starts[conversation_start] if conversation_start < len(messages) else len(token_ids)
    for offset, message in enumerate(messages[conversation_start:]):
        dropped = starts[conversation_start + offset] - first
        if message.author.role == Role.USER and len(token_ids) - dropped <= budget:
            return offset
    return None
