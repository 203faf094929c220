"""``truncation: "auto"``: where a conversation that does not fit is cut (``harmony/truncation.py``)."""

from __future__ import annotations

from openai_harmony import Conversation, HarmonyEncoding, Message, Role

from oss_responses.harmony.truncation import truncation_start

SYSTEM = Message.from_role_and_content(Role.SYSTEM, "You are a model.")


def _user(text: str) -> Message:
    return Message.from_role_and_content(Role.USER, text)


def _assistant(text: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel("final")


CONVERSATION = [_user("one " * 50), _assistant("answer " * 50), _user("two " * 50), _assistant("reply " * 50),
                _user("three")]


def _cut(encoding: HarmonyEncoding, budget: int) -> tuple[int | None, int]:
    messages = [SYSTEM, *CONVERSATION]
    tokens = encoding.render_conversation_for_completion(Conversation.from_messages(messages), Role.ASSISTANT)
    start = encoding.encode("<|start|>", allowed_special="all")[0]
    return truncation_start(messages, 1, tokens, start, budget), len(tokens)


def _length_from(encoding: HarmonyEncoding, index: int) -> int:
    messages = [SYSTEM, *CONVERSATION[index:]]
    return len(encoding.render_conversation_for_completion(Conversation.from_messages(messages), Role.ASSISTANT))


def test_truncation_start_keeps_prompt_that_fits(encoding: HarmonyEncoding) -> None:
    _, length = _cut(encoding, 10_000)
    assert _cut(encoding, length) == (0, length)


def test_truncation_start_cuts_at_earliest_user_message_that_fits(encoding: HarmonyEncoding) -> None:
    _, length = _cut(encoding, 10_000)
    from_second = _length_from(encoding, 2)
    assert _cut(encoding, from_second)[0] == 2
    assert _cut(encoding, length - 1)[0] == 2  # the assistant's answer alone is no place to begin


def test_truncation_start_never_cuts_the_last_user_message(encoding: HarmonyEncoding) -> None:
    assert _cut(encoding, _length_from(encoding, 4))[0] == 4
    assert _cut(encoding, _length_from(encoding, 4) - 1)[0] is None
