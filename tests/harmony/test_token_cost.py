"""What tokenizing costs, found without tokenizing: the long unbroken runs (harmony/token_cost.py)."""

from __future__ import annotations

import random

import pytest
from openai_harmony import HarmonyEncoding

from oss_responses.errors import BadRequest
from oss_responses.harmony.token_cost import (
    MAX_RUN,
    RUN_FLOOR,
    check_tokenizable,
    cost_of,
    long_runs,
    run_spans,
    split_long_runs,
)

PROSE = "The quick brown fox, aged 42, jumps over the lazy dog.\n" * 20_000  # ~1 MB


@pytest.mark.parametrize(
    ("text", "runs"),
    [
        ("ab " + "x" * 5_000 + " cd", [5_000]),
        ("DNA: " + "acgt" * 1_000 + ".", [4_000]),
        ("x\u0300" * 2_000, [6_000]),  # letters and combining marks are one piece; its length in bytes
        ("中" * 2_000, [6_000]),
        ("ok." + "=" * 3_000 + "\n" * 10 + "ok", [3_001]),
        ("/\n" * 2_000, [4_000]),  # line breaks and slashes after punctuation stay in its piece
        ("a" + " " * 2_000 + "b", [2_000]),
        ("x" * (RUN_FLOOR - 1), []),
    ],
)
def test_long_runs_finds_each_kind_of_unbroken_run(text: str, runs: list[int]) -> None:
    assert long_runs(text) == runs


@pytest.mark.parametrize("text", [
    PROSE,
    "".join(random.Random(0).choices("abcdefABCDEF0123456789+/", k=200_000)),
    ",,,,,,,,,\r\n" * 6_000,  # a CSV's empty rows: a line break ends each piece of punctuation
])
def test_long_runs_finds_none_in_prose_base64_or_csv(text: str) -> None:
    assert long_runs(text) == []


def test_cost_of_counts_every_string_of_the_messages() -> None:
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "hi"}],
         "tools": {"functions": {"tools": [{"name": "f", "description": "y" * 2_000}]}}},
        {"role": "user", "content": [{"type": "text", "text": "z" * 3_000}]},
    ]
    cost = cost_of(messages)
    assert sorted(cost.runs) == [2_000, 3_000]
    assert cost.weight == cost.chars + (2_000**2 + 3_000**2) // 256


def test_check_tokenizable_refuses_run_longer_than_max() -> None:
    check_tokenizable(cost_of([{"role": "user", "content": [{"type": "text", "text": "x" * MAX_RUN}]}]))
    with pytest.raises(BadRequest) as caught:
        check_tokenizable(cost_of([{"role": "user", "content": [{"type": "text", "text": "x" * (MAX_RUN + 1)}]}]))
    assert caught.value.param == "input" and "65,537 bytes without a break" in caught.value.message


def test_check_tokenizable_refuses_runs_that_together_cost_more_than_four_of_the_longest() -> None:
    four = [{"role": "user", "content": [{"type": "text", "text": " ".join(["x" * MAX_RUN] * 4)}]}]
    check_tokenizable(cost_of(four))
    fifth = {"role": "user", "content": [{"type": "text", "text": "w" * MAX_RUN}]}
    with pytest.raises(BadRequest, match="5 runs"):
        check_tokenizable(cost_of([*four, fifth]))


@pytest.mark.parametrize("text", ["short", "x" * 5_000 + " <|end|> " + "=" * 3_000, "é" * 4_100])
def test_split_long_runs_decodes_to_same_text(text: str, encoding: HarmonyEncoding) -> None:
    parts = split_long_runs(text)
    assert "".join(parts) == text
    assert all(end - start <= RUN_FLOOR for part in parts for start, end in run_spans(part))
    tokens = [token for part in parts for token in encoding.encode(part, allowed_special="all")]
    assert encoding.decode(tokens) == text
    assert encoding.encode("<|end|>", allowed_special="all")[0] in tokens or "<|end|>" not in text
