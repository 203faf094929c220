"""Safe arithmetic: parse with ``ast``, evaluate numbers and operators only, never ``eval``.

Accepted: int/float literals, ``+ - * / // % **``, unary ``+ -``, parentheses. A program (the
``python`` tool's code) is a sequence of such expressions, each optionally wrapped in ``print(...)``;
every value is printed on its own line. Anything else (names, attribute access, other calls,
assignments, strings) is refused with :class:`ArithmeticRefused`, before anything is evaluated.
Big integers are bounded so that ``9**9**9`` is refused instead of eating the CPU.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

MAX_SOURCE_CHARS = 10_000
MAX_EXPONENT = 10_000
MAX_INT_BITS = 14_000  # about 4200 digits: under Python's int → str limit of 4300

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class ArithmeticRefused(ValueError):
    """The text is not plain arithmetic, or evaluating it failed (the message says why)."""


def evaluate(expression: str) -> Number:
    """The value of one arithmetic expression."""
    tree = _parse(expression, mode="eval")
    assert isinstance(tree, ast.Expression)
    return _eval(tree.body)


def run_program(code: str) -> str:
    """What a Python REPL would print for a sequence of arithmetic expressions (one per line)."""
    tree = _parse(code, mode="exec")
    assert isinstance(tree, ast.Module)
    expressions = [_statement_expression(statement) for statement in tree.body]
    return "".join(f"{_format(_eval(expression))}\n" for expression in expressions)


def _parse(source: str, mode: str) -> ast.AST:
    if len(source) > MAX_SOURCE_CHARS:
        raise ArithmeticRefused(f"input longer than {MAX_SOURCE_CHARS} characters")
    try:
        return ast.parse(source, mode=mode)
    except SyntaxError as exc:
        raise ArithmeticRefused(f"syntax error: {exc.msg}") from exc
    except (RecursionError, MemoryError) as exc:
        raise ArithmeticRefused("expression nested too deeply") from exc


def _statement_expression(statement: ast.stmt) -> ast.expr:
    if not isinstance(statement, ast.Expr):
        raise ArithmeticRefused(f"only expressions are allowed, not {type(statement).__name__}")
    value = statement.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "print":
        if len(value.args) != 1 or value.keywords:
            raise ArithmeticRefused("print() takes exactly one arithmetic expression here")
        return value.args[0]
    return value


def _eval(node: ast.expr) -> Number:
    try:
        return _eval_node(node)
    except ArithmeticRefused:
        raise
    except (ZeroDivisionError, OverflowError, ValueError) as exc:
        raise ArithmeticRefused(f"{type(exc).__name__}: {exc}") from exc
    except RecursionError as exc:
        raise ArithmeticRefused("expression nested too deeply") from exc


def _eval_node(node: ast.expr) -> Number:
    # bool is an int subclass, but True is no number to compute with
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval_node(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _bounded(_BINARY[type(node.op)](left, right))
    raise ArithmeticRefused(f"not allowed in arithmetic: {_describe(node)}")


def _check_power(base: Number, exponent: Number) -> None:
    if abs(exponent) > MAX_EXPONENT:
        raise ArithmeticRefused(f"exponent {exponent} is larger than {MAX_EXPONENT}")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        if base.bit_length() * exponent > MAX_INT_BITS:
            raise ArithmeticRefused(f"result would exceed {MAX_INT_BITS} bits")


def _bounded(value: Number | complex) -> Number:
    if isinstance(value, complex):
        raise ArithmeticRefused("the result is a complex number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ArithmeticRefused(f"result exceeds {MAX_INT_BITS} bits")
    return value


def _format(value: Number) -> str:
    return repr(value)


def _describe(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return f"name '{node.id}'"
    if isinstance(node, ast.Call):
        return "function call"
    if isinstance(node, ast.Constant):
        return f"{type(node.value).__name__} literal"
    return type(node).__name__
