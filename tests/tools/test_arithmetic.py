"""The calculator's evaluator: arithmetic only, bounded, no eval."""

from __future__ import annotations

import pytest

from oss_responses.tools.servers.arithmetic import (
    ArithmeticRefused,
    evaluate,
    run_program,
)


@pytest.mark.parametrize(
    ("expression", "value"),
    [("123*456", 56088), ("(2 + 3) * 4 ** 2", 80), ("7 // 2", 3), ("7 % 4", 3), ("1 / 4", 0.25), ("-2 ** 2", -4)],
)
def test_evaluate_arithmetic_returns_value(expression: str, value: float) -> None:
    assert evaluate(expression) == value


def test_run_program_prints_each_expression() -> None:
    assert run_program("123*456\nprint(2 ** 10)\n") == "56088\n1024\n"


@pytest.mark.parametrize(
    "code",
    [
        "__import__('os')",
        "x",
        "abs(-1)",
        "(1).__class__",
        "'a' * 3",
        "a = 1",
        "import os",
        "[1, 2]",
        "lambda: 1",
        "print(1, 2)",
        "1 if 1 else 2",
        "2 << 3",
    ],
)
def test_run_program_refuses_non_arithmetic(code: str) -> None:
    with pytest.raises(ArithmeticRefused):
        run_program(code)


@pytest.mark.parametrize("code", ["9 ** 9 ** 9", "10 ** 100000", "(2 ** 9000) ** 2", "2 ** 9999 * 2 ** 9999"])
def test_run_program_refuses_huge_numbers(code: str) -> None:
    with pytest.raises(ArithmeticRefused, match="exceed|larger"):
        run_program(code)


@pytest.mark.parametrize(("code", "reason"), [("1 / 0", "ZeroDivisionError"), ("(-8) ** 0.5", "complex")])
def test_run_program_refuses_undefined_results(code: str, reason: str) -> None:
    with pytest.raises(ArithmeticRefused, match=reason):
        run_program(code)


def test_run_program_refuses_deep_nesting() -> None:
    with pytest.raises(ArithmeticRefused):
        run_program("(" * 500 + "1" + ")" * 500)


def test_run_program_refuses_long_input() -> None:
    with pytest.raises(ArithmeticRefused, match="longer"):
        run_program("1+" * 6000 + "1")
