"""Harmony prompts and forced output scripts for the engine tests (openai_harmony only)."""

from __future__ import annotations

from collections.abc import Sequence

from openai_harmony import (
    Author,
    Conversation,
    HarmonyEncoding,
    Message,
    Role,
    SystemContent,
)

from oss_responses.engine.base import SamplingSettings
from oss_responses.engine.vllm import FORCED_TOKENS_KEY

END, RETURN = 200007, 200002
# What the prompt ends with and every rendered assistant message starts with: <|start|>assistant
ASSISTANT_HEADER_LEN = 2


def prompt_for(encoding: HarmonyEncoding, user_text: str) -> list[int]:
    conversation = Conversation.from_messages(
        [
            Message.from_role_and_content(Role.SYSTEM, SystemContent.new()),
            Message.from_role_and_content(Role.USER, user_text),
        ]
    )
    return encoding.render_conversation_for_completion(conversation, Role.ASSISTANT)


def analysis(text: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel("analysis")


def final(text: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel("final")


def tool_call(function: str, arguments: str) -> Message:
    return (
        Message.from_role_and_content(Role.ASSISTANT, arguments)
        .with_channel("commentary")
        .with_recipient(f"functions.{function}")
        .with_content_type("<|constrain|>json")
    )


def tool_result(function: str, output: str) -> Message:
    return (
        Message.from_author_and_content(Author.new(Role.TOOL, f"functions.{function}"), output)
        .with_channel("commentary")
        .with_recipient("assistant")
    )


def script_for(encoding: HarmonyEncoding, messages: Sequence[Message]) -> list[int]:
    """The tokens the model emits after a prompt ending in <|start|>assistant to say ``messages``.

    A final message ends the turn with <|return|>; a tool call already renders with <|call|>.
    """
    tokens: list[int] = []
    for message in messages:
        tokens += encoding.render(message)
    tokens = tokens[ASSISTANT_HEADER_LEN:]
    if tokens[-1] == END:
        tokens[-1] = RETURN
    return tokens


def continuation(encoding: HarmonyEncoding, previous: Sequence[int], *messages: Message) -> list[int]:
    """``previous`` (prompt + output) followed by ``messages`` and a new <|start|>assistant."""
    tokens = list(previous)
    for message in messages:
        tokens += encoding.render(message)
    return tokens + encoding.render(final(""))[:ASSISTANT_HEADER_LEN]


def forced(encoding: HarmonyEncoding, script: Sequence[int], **sampling: object) -> SamplingSettings:
    return SamplingSettings(
        max_tokens=len(script) + 16,
        stop_token_ids=encoding.stop_tokens_for_assistant_actions(),
        extra={FORCED_TOKENS_KEY: list(script)},
        **sampling,  # type: ignore[arg-type]
    )


def parse(encoding: HarmonyEncoding, tokens: Sequence[int]) -> list[Message]:
    return encoding.parse_messages_from_completion_tokens(list(tokens), Role.ASSISTANT)
