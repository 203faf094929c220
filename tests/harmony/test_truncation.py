"""``truncation: "auto"``: where a conversation that does not fit is cut (``harmony/truncation.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from openai_harmony import Author, Conversation, HarmonyEncoding, Message, Role

from oss_responses.harmony.truncation import (
    START_TOKEN,
    WHOLE,
    Cut,
    context_budget,
    last_start,
    steps_to_drop,
    truncation_cut,
)

SYSTEM = Message.from_role_and_content(Role.SYSTEM, "You are a model.")


def _user(text: str) -> Message:
    return Message.from_role_and_content(Role.USER, text)


def _assistant(text: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel("final")


def _step(n: int) -> list[Message]:
    """One tool step of an agent's loop: thinking, a function call, its result."""
    return [
        Message.from_role_and_content(Role.ASSISTANT, f"I look it up, step {n}.").with_channel("analysis"),
        Message.from_role_and_content(Role.ASSISTANT, "{}").with_channel("commentary")
        .with_recipient("functions.lookup").with_content_type("<|constrain|>json"),
        Message.from_author_and_content(Author.new(Role.TOOL, "functions.lookup"), f"result {n} " + "fact " * 60)
        .with_recipient("assistant").with_channel("commentary"),
    ]


CONVERSATION = [_user("one " * 50), _assistant("answer " * 50), _user("two " * 50), _assistant("reply " * 50),
                _user("three")]
LOOP = [_user("first " * 20), _assistant("done " * 20), _user("question " * 20), *_step(1), *_step(2), *_step(3)]


def _render(encoding: HarmonyEncoding, conversation: Sequence[Message]) -> list[int]:
    messages = Conversation.from_messages([SYSTEM, *conversation])
    return list(encoding.render_conversation_for_completion(messages, Role.ASSISTANT))


def _cut(encoding: HarmonyEncoding, budget: int, conversation: Sequence[Message] = CONVERSATION) -> Cut | None:
    return truncation_cut([SYSTEM, *conversation], 1, _render(encoding, conversation), budget)


def _length(encoding: HarmonyEncoding, cut: Cut, conversation: Sequence[Message] = CONVERSATION) -> int:
    return len(_render(encoding, cut.kept(conversation)))


def test_start_token_is_harmony_s_message_start(encoding: HarmonyEncoding) -> None:
    assert encoding.encode("<|start|>", allowed_special="all") == [START_TOKEN]


def test_truncation_cut_keeps_prompt_that_fits(encoding: HarmonyEncoding) -> None:
    assert _cut(encoding, _length(encoding, WHOLE)) == WHOLE


def test_truncation_cut_begins_at_earliest_user_message_that_fits(encoding: HarmonyEncoding) -> None:
    assert _cut(encoding, _length(encoding, Cut(2))) == Cut(2)
    assert _cut(encoding, _length(encoding, WHOLE) - 1) == Cut(2)  # the assistant's answer alone is no place to begin


def test_truncation_cut_never_cuts_the_last_user_message(encoding: HarmonyEncoding) -> None:
    assert _cut(encoding, _length(encoding, Cut(4))) == Cut(4)
    assert _cut(encoding, _length(encoding, Cut(4)) - 1) == Cut(4)  # the answer gets what room is left


def test_truncation_cut_of_no_user_message_is_none(encoding: HarmonyEncoding) -> None:
    assert _cut(encoding, 10, [_assistant("answer " * 50)]) is None


def test_truncation_cut_drops_earliest_tool_steps_after_the_last_question(encoding: HarmonyEncoding) -> None:
    from_question = _length(encoding, Cut(2), LOOP)
    assert _cut(encoding, from_question, LOOP) == Cut(2)
    # The question stays, then the loop goes on from its second step (index 6: the first step's three gone).
    assert _cut(encoding, from_question - 1, LOOP) == Cut(6, pinned=2)
    assert _length(encoding, Cut(6, pinned=2), LOOP) < from_question


def test_truncation_cut_keeps_no_tool_result_without_its_call(encoding: HarmonyEncoding) -> None:
    second_step = _length(encoding, Cut(6, pinned=2), LOOP)
    assert _cut(encoding, second_step - 1, LOOP) == Cut(9, pinned=2)  # whole steps only: the third begins at 9


def test_truncation_cut_keeps_the_question_and_the_last_tool_step(encoding: HarmonyEncoding) -> None:
    last_step = _length(encoding, Cut(9, pinned=2), LOOP)
    assert Cut(9, pinned=2).kept(LOOP) == [LOOP[2], *LOOP[9:]]
    assert _cut(encoding, last_step, LOOP) == Cut(9, pinned=2)
    assert _cut(encoding, last_step - 1, LOOP) == Cut(9, pinned=2)


def test_steps_to_drop_drops_earliest_steps_that_make_it_fit() -> None:
    boundaries = [100, 200, 300, 400]  # three steps of 100 tokens, the next message at 400
    assert steps_to_drop(boundaries, 410, 410) == 0
    assert steps_to_drop(boundaries, 410, 310) == 1
    assert steps_to_drop(boundaries, 410, 309) == 2
    assert steps_to_drop(boundaries, 410, 100) == 2  # the latest step stays, whatever the budget


def test_last_start_finds_the_open_assistant_message(encoding: HarmonyEncoding) -> None:
    tokens = _render(encoding, CONVERSATION)
    assert last_start(tokens) == len(tokens) - 2  # <|start|>assistant
    assert last_start([1, 2, 3]) is None


def test_context_budget_leaves_answer_its_output_budget_at_most_half_the_context() -> None:
    assert context_budget(800, 200) == 600
    assert context_budget(800, 4096) == 400
