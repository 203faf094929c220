"""Reading a JSON request body without trusting it.

Each refusal is a 4xx in OpenAI's error shape, before anything is validated or stored:
- larger than ``max_body_bytes``: 413, from ``Content-Length`` before reading, or as soon as the
  streamed body passes the limit (a chunked body is never held whole);
- not UTF-8 (JSON's only encoding on the wire; ``json.loads`` on bytes would guess UTF-16/32), not
  JSON, ``NaN``/``Infinity``: 400;
- nested deeper than ``max_json_depth`` (the C parser raises RecursionError near 1,000 levels, and
  pydantic, SQL JSON and the renderer recurse too): 400;
- strings holding a lone surrogate (not encodable as UTF-8 when stored): 400 naming the parameter
  (a NUL character is kept: JSON documents are ``json``, not ``jsonb``, on PostgreSQL);
- integers outside ±2^53 (what every JSON reader represents exactly; Redis ids, vLLM's sampling and
  SQL columns would fail on more): 400 naming the parameter;
- numbers beyond a double's range (``1e400``): Python reads them as infinity, which a request's schema
  (a function's ``parameters``, ``text.format.schema``) was then stored as ``null``: 400 naming the parameter.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from fastapi import Request

from oss_responses.config import Settings
from oss_responses.errors import BadRequest, PayloadTooLarge, ServiceError

MAX_SAFE_INTEGER = 2**53
# A lone surrogate cannot be encoded as UTF-8 (nor stored); a NUL character can, and is kept as sent
# (PostgreSQL holds it: JSON documents are json, not jsonb).
_UNSAFE_CHARACTERS = re.compile("[\ud800-\udfff]")
# In the raw text: an escaped surrogate (a pair is fine, but found the same way); digits, all as one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# The raw text with its digits as 0, an exponent's e and + kept, all else blank: an unsafe integer is 16 digits
# in a row, a number past a double's range has an exponent of three digits or more after a digit (or a run of
# 309 digits): C-speed ``in`` tests. Matched in strings as well, which only costs a walk.
_DIGITS_ONLY = bytes(
    ord("0") if ord("0") <= byte <= ord("9") else ord("e") if byte in b"eE" else byte if byte == ord("+") else ord(" ")
    for byte in range(256)
)
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))

T = TypeVar("T")


def _same(value: Any) -> Any:
    return value


# A body above this is parsed (and ``then`` applied) in a thread: megabytes of JSON cost the event loop
# seconds (a 1.5 MB schema had frozen the API for every client), and another thread yields the GIL.
PARSE_OFF_LOOP_BYTES = 256 * 1024


async def read_json_body(request: Request, settings: Settings, then: Callable[[Any], T] = _same) -> T:
    """The parsed body of a JSON request, checked as the module docstring says; ``then`` applied to it
    (a request's own validation), off the event loop for a large body."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise BadRequest("The request body must be JSON, sent with Content-Type: application/json.")
    raw = await _read_limited(request, settings.max_body_bytes)
    if len(raw) <= PARSE_OFF_LOOP_BYTES:
        return _parsed(raw, settings.max_json_depth, then)
    return await anyio.to_thread.run_sync(_parsed, raw, settings.max_json_depth, then)


def _parsed(raw: bytes, max_depth: int, then: Callable[[Any], T]) -> T:
    try:
        return _checked(raw, max_depth, then)
    except ServiceError as exc:
        # Its traceback's frames hold the parsed body (a ValidationError its values too), and the frames
        # and futures it crossed make cycles: freed only by a full collection, 40 refused 1.3 MB messages
        # held 900 MB. Raised without them, the body is freed at once.
        raise exc.with_traceback(None) from None


def _checked(raw: bytes, max_depth: int, then: Callable[[Any], T]) -> T:
    value = _parse(raw)
    check_json_value(value, max_depth, raw)
    return then(value)


def parse_json_message(raw: bytes, settings: Settings, then: Callable[[Any], T] = _same) -> T:
    """A JSON message received whole (a WebSocket's), checked as a request body is; ``then`` applied."""
    if len(raw) > settings.max_body_bytes:
        raise _too_large(settings.max_body_bytes)
    return _parsed(raw, settings.max_json_depth, then)


async def _read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The request body is larger than this service accepts ({limit} bytes; OSS_RESPONSES_MAX_BODY_BYTES).",
        code="request_too_large",
    )


def _parse(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"The request body is not valid UTF-8: {exc}.") from exc
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"We could not parse the JSON body of your request: {exc}") from exc
    except RecursionError as exc:
        raise _too_deep() from exc


def _refuse_constant(name: str) -> Any:
    raise BadRequest(f"We could not parse the JSON body of your request: {name} is not a JSON number.")


def _too_deep(param: str | None = None) -> BadRequest:
    return BadRequest("The JSON body is nested too deeply.", param=param, code="invalid_value")


def check_json_value(value: Any, max_depth: int, raw: bytes | None = None) -> None:
    """The parsed body checked as the module docstring says; the first offending value named by its path.

    ``raw``, the text it was parsed from, tells whether any check can fail, in C-speed scans: a lone
    surrogate only comes from a ``\\uD800``-``\\uDFFF`` escape (UTF-8 holds none), an unsafe integer only
    from 16 or more digits in a row, and the nesting is that of the brackets outside strings. Only then is
    the value walked, to name what fails: a 16 MiB body of five million empty objects was walked for
    5-11 s of the API's CPU (against 0.45 s to parse it)."""
    if raw is None or _maybe_unsafe_scalar(raw) or _nested_deeper(raw, max_depth):
        _walk_with_paths(value, max_depth)


def _maybe_unsafe_scalar(raw: bytes) -> bool:
    if b"\\u" in raw and _SURROGATE_ESCAPE.search(raw) is not None:
        return True
    digits = raw.translate(_DIGITS_ONLY)
    return b"0" * 16 in digits or (b"0e" in digits and (b"0e000" in digits or b"0e+000" in digits))


def _nested_deeper(raw: bytes, max_depth: int) -> bool:
    """Whether valid JSON ``raw`` nests more than ``max_depth`` arrays and objects: its brackets outside
    strings, each pass deleting the innermost pairs (one level of every branch)."""
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    for _ in range(max_depth):
        if not brackets:
            return False
        # A pair emptied by this pass is the next level's: marked, then dropped, not deleted at once.
        brackets = brackets.replace(b"{}", b"x").replace(b"[]", b"x").replace(b"x", b"")
    return bool(brackets)


def _walk_with_paths(value: Any, max_depth: int) -> None:
    """Walk the parsed body without recursion; the first offending value is named by its path."""
    pending: list[tuple[Any, str, int]] = [(value, "", 0)]
    while pending:
        current, path, depth = pending.pop()
        if isinstance(current, dict):
            if depth >= max_depth:
                raise _too_deep(path or None)
            for key, child in current.items():
                _check_string(key, path)  # a bad key is named by its parent: the error must stay encodable
                pending.append((child, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(current, list):
            if depth >= max_depth:
                raise _too_deep(path or None)
            pending.extend((child, f"{path}[{index}]", depth + 1) for index, child in enumerate(current))
        elif isinstance(current, str):
            _check_string(current, path)
        elif isinstance(current, int) and not isinstance(current, bool) and abs(current) > MAX_SAFE_INTEGER:
            raise BadRequest(
                f"Invalid value for '{path}': integers must be within ±2^53.", param=path or None, code="invalid_value"
            )
        elif isinstance(current, float) and not math.isfinite(current):  # NaN and Infinity were refused parsing
            raise BadRequest(
                f"Invalid value for '{path}': numbers must be within a double's range (about ±1.8e308).",
                param=path or None, code="invalid_value",
            )


def _check_string(text: str, path: str) -> None:
    found = _UNSAFE_CHARACTERS.search(text)
    if found is None:
        return
    raise BadRequest(
        f"Invalid value for '{path}': strings may not contain an unpaired UTF-16 surrogate.",
        param=path or None, code="invalid_value",
    )
