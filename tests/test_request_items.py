"""A create request's input items: what is accepted, and the 400s that name the item or part."""

from __future__ import annotations

import pytest
from support.create_requests import refusal

from oss_responses.request_items import MAX_INPUT_TEXT, MAX_ITEM_ID
from oss_responses.requests import parse_create_request


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "x" * (MAX_INPUT_TEXT + 1)}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "x" * (MAX_INPUT_TEXT + 1)}]}]},
     "input[0].content[0].text"),
])
def test_parse_request_input_text_past_openai_length_refused(body: dict, param: str) -> None:
    error = refusal(body)
    assert (error.param, error.code) == (param, "string_above_max_length")


def test_parse_request_input_text_at_openai_length_accepted() -> None:
    assert len(parse_create_request({"model": "m", "input": "x" * MAX_INPUT_TEXT}).input) == MAX_INPUT_TEXT


def test_parse_request_input_part_of_wrong_type_names_the_part_and_the_allowed_types() -> None:
    # Not the string branch of content's union ("input[0].content.str: Input should be a valid string").
    error = refusal({"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]})
    assert (error.param, error.code) == ("input[0].content[0].type", "invalid_value")
    assert error.message == ("Invalid value: 'output_text'. Supported values are: 'input_text', 'input_image', "
                             "'input_file'.")


def test_parse_request_input_part_field_of_wrong_type_names_the_field() -> None:
    error = refusal({"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]})
    assert (error.param, error.code) == ("input[0].content[0].text", "invalid_type")


def test_parse_request_input_part_without_field_is_missing_parameter() -> None:
    error = refusal({"input": [{"role": "user", "content": [{"type": "input_text"}]}]})
    assert (error.param, error.code) == ("input[0].content[0].text", "missing_required_parameter")


def test_parse_request_unsupported_item_type_names_the_item() -> None:
    error = refusal({"input": [{"type": "computer_call_output", "call_id": "c"}]})
    assert (error.param, error.code) == ("input[0].type", "unsupported_value")


@pytest.mark.parametrize("item", [{"id": "msg_1"}, {"type": None, "id": "msg_1"}])
def test_parse_request_item_reference_without_type_is_a_reference(item: dict) -> None:
    [parsed] = parse_create_request({"model": "m", "input": [item]}).input
    assert (parsed.type, parsed.id) == ("item_reference", "msg_1")  # type: ignore[union-attr]


def test_parse_request_message_with_null_type_is_a_message() -> None:
    [parsed] = parse_create_request({"model": "m", "input": [{"type": None, "role": "user", "content": "hi"}]}).input
    assert (parsed.role, parsed.content) == ("user", "hi")  # type: ignore[union-attr]


@pytest.mark.parametrize("twice", [
    [{"type": "item_reference", "id": "msg_a"}, {"type": "item_reference", "id": "msg_a"}],
    [{"type": "message", "role": "assistant", "content": "hi", "id": "msg_a"},
     {"type": "message", "role": "assistant", "content": "hi", "id": "msg_a"}],
    [{"type": "message", "role": "user", "content": "hi", "id": "msg_a"}, {"type": "item_reference", "id": "msg_a"}],
])
def test_parse_request_input_with_one_id_twice_refused_in_openai_words(twice: list[dict]) -> None:
    """Stored twice, the id made paging its input items a loop: the cursor found the first copy again."""
    error = refusal({"input": twice})
    assert error.param == "input"
    assert error.message == "Duplicate item found with id msg_a. Remove duplicate items from your input and try again."


def test_parse_request_input_item_id_past_limit_refused() -> None:
    """On PostgreSQL an indexed id past 2,704 bytes was a 503 'database unavailable', which the SDK retried."""
    error = refusal({"input": [{"type": "reasoning", "id": "rs_" + "a" * MAX_ITEM_ID, "summary": []}]})
    assert (error.param, error.code) == ("input[0].id", "string_above_max_length")
