"""pydantic's validation errors in OpenAI's words: the ``param`` where the sent body is wrong (not the
name pydantic gives a union's branch, ``input[0].content.str``), and the message and code OpenAI's API
gives for that kind of error (``Unknown parameter: 'x'.``, ``integer_below_min_value``...)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from oss_responses.errors import BadRequest

M = TypeVar("M", bound=BaseModel)


def openai_error(value: Any, exc: ValidationError, prefix: str = "") -> BadRequest:
    """The 400 for ``exc``, raised validating ``value``; ``prefix``: where ``value`` is in the body."""
    path, error = _closest_error(value, exc)
    return _bad_request(_param(prefix, path).lstrip(".") or None, error)


def validate_one(model: type[M], value: Any, param: str) -> M:
    """``value`` validated by ``model``; a failure is the 400 of :func:`openai_error` under ``param``."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise openai_error(value, exc, param) from exc


def _path(value: Any, error: ErrorDetails) -> list[str | int]:
    """Where in the sent ``value`` an error lies: pydantic's location without the names it gives the
    branches of a union (``str``, ``list[...]``, a tag), which are not in the body; a dict key's error
    lies at the dict."""
    path: list[str | int] = []
    node, loc = value, error["loc"]
    for index, part in enumerate(loc):
        if part == "[key]":
            return path[:-1]
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif not (index == len(loc) - 1 and error["type"] == "missing"):
            continue
        path.append(part)
    return path


def _param(prefix: str, path: list[str | int]) -> str:
    return prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _closest_error(value: Any, exc: ValidationError) -> tuple[list[str | int], ErrorDetails]:
    """The error that reached deepest into the body: of a union, the branch the body was meant for
    (a list of parts rather than the string it is not). Branches whose ``type`` is not the body's are
    left out; when none is, the error is the ``type`` itself, with every value the branches allow."""
    errors = exc.errors()
    mismatched = [error for error in errors if error["type"] == "literal_error" and error["loc"][-1:] == ("type",)]
    branches = [error["loc"][:-1] for error in mismatched]
    others = [error for error in errors if not any(error["loc"][:len(b)] == b for b in branches)]
    # At one depth: a branch whose type matched, then a wrong value over a wrong type (that branch is
    # of the body's kind).
    located = [(_path(value, error), 1, error) for error in others]
    if mismatched:
        expected = ", ".join(str(error.get("ctx", {}).get("expected")) for error in mismatched)
        located.append((_path(value, mismatched[0]), 0, {**mismatched[0], "ctx": {"expected": expected}}))
    path, _, error = max(located, key=lambda found: (len(found[0]), found[1], not found[2]["type"].endswith("_type")))
    return path, error


# pydantic's bound errors, as OpenAI names them.
_BOUND_CODES = {("greater_than_equal", True): ("integer_below_min_value", "integer below minimum value", ">="),
                ("greater_than_equal", False): ("decimal_below_min_value", "decimal below minimum value", ">="),
                ("less_than_equal", True): ("integer_above_max_value", "integer above maximum value", "<="),
                ("less_than_equal", False): ("decimal_above_max_value", "decimal above maximum value", "<=")}


def _bad_request(param: str | None, error: ErrorDetails) -> BadRequest:
    """OpenAI's wording of one validation error at ``param``."""
    kind, bound = error["type"], error.get("ctx", {})
    if kind == "missing":
        return BadRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    if kind == "extra_forbidden":
        return BadRequest(f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter")
    if kind in ("greater_than_equal", "less_than_equal"):
        limit = bound["ge" if kind == "greater_than_equal" else "le"]
        code, what, sign = _BOUND_CODES[(kind, isinstance(limit, int))]
        return BadRequest(f"Invalid '{param}': {what}. Expected a value {sign} {limit:g}, but got {error['input']} "
                          "instead.", param=param, code=code)
    if kind == "too_long" and isinstance(error["input"], dict):
        return BadRequest(f"Invalid '{param}': too many properties. Expected an object with at most "
                          f"{bound['max_length']} properties, but got an object with {len(error['input'])} properties "
                          "instead.", param=param, code="object_above_max_properties")
    if kind == "too_long" and isinstance(error["input"], list):
        return BadRequest(f"Invalid '{param}': array too long. Expected an array with maximum length "
                          f"{bound['max_length']}, but got an array with length {len(error['input'])} instead.",
                          param=param, code="array_above_max_length")
    if kind == "string_too_long":
        return too_long(param, bound["max_length"], len(error["input"]))
    if kind == "literal_error":
        return BadRequest(f"Invalid value: {error['input']!r}. Supported values are: {bound['expected']}.",
                          param=param, code="invalid_value")
    if kind.endswith("_type"):
        expected = _EXPECTED.get(kind)
        message = (f"expected {expected}, but got {_kind_of(error['input'])} instead." if expected else error["msg"])
        return BadRequest(f"Invalid type for '{param}': {message}", param=param, code="invalid_type")
    return BadRequest(f"Invalid value for '{param}': {error['msg']}", param=param, code="invalid_value")


# What a pydantic type error expected, and what a JSON value is, in OpenAI's words.
_EXPECTED = {"string_type": "a string", "int_type": "an integer", "float_type": "a decimal", "bool_type": "a boolean",
             "list_type": "an array", "dict_type": "an object", "model_type": "an object"}


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a decimal"), (str, "a string"),
                       (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return "another type"


def too_long(param: str | None, limit: int, length: int) -> BadRequest:
    return BadRequest(f"Invalid '{param}': string too long. Expected a string with maximum length {limit}, but got "
                      f"a string with length {length} instead.", param=param, code="string_above_max_length")


def mismatch(param: str, pattern: str) -> BadRequest:
    """OpenAI's words for a string outside its pattern."""
    return BadRequest(f"Invalid '{param}': string does not match pattern. Expected a string that matches the "
                      f"pattern '{pattern}'.", param=param, code="invalid_value")
