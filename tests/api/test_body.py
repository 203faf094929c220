"""check_json_value: what the raw text rules out is not walked; what it cannot rule out is named by path."""

from __future__ import annotations

import gc
import json
import weakref
from typing import Any

import anyio
import pytest

from oss_responses.api import body
from oss_responses.config import Settings
from oss_responses.errors import BadRequest

MAX_DEPTH = 8
BODIES = {
    "nested at the limit": '{"a": [[[[[[[1]]]]]]]}',
    "nested past the limit": '{"a": [[[[[[[[1]]]]]]]]}',
    "brackets inside a string": '{"a": "[[[[[[[[[[{{{{{{{{{{", "b": "]]]]\\"[[[["}',
    "a lone surrogate deep inside": '{"a": [{"b": ["ok", "half \\ud800"]}]}',
    "a lone surrogate in a key": '{"a": {"k\\udc00": 1}}',
    "a surrogate pair": '{"a": "\\ud83d\\ude00"}',
    "an unsafe integer": '{"a": [1, {"b": 9007199254740993}]}',
    "a safe 16-digit integer": '{"a": 9007199254740992}',
    "many digits in a string": '{"a": "12345678901234567890"}',
    "a number past a double's range": '{"a": [0.5, {"b": 1e400}]}',
    "a negative one, exponent signed": '{"a": -2.5E+308}',
    "a tiny number (read as 0)": '{"a": 1e-400}',
    "a large exponent in a string": '{"a": "v1e400"}',
    "a large finite exponent": '{"a": 1e300}',
}


def _outcome(text: str, with_raw: bool) -> tuple[str | None, str | None] | None:
    value = json.loads(text)
    try:
        body.check_json_value(value, MAX_DEPTH, text.encode() if with_raw else None)
    except BadRequest as exc:
        return exc.param, str(exc)
    return None


@pytest.mark.parametrize("name", sorted(BODIES))
def test_check_with_raw_text_refuses_exactly_what_the_full_walk_refuses(name: str) -> None:
    assert _outcome(BODIES[name], with_raw=True) == _outcome(BODIES[name], with_raw=False)


def test_check_refuses_what_it_should() -> None:
    refused = {name for name, text in BODIES.items() if _outcome(text, with_raw=True) is not None}
    assert refused == {"nested past the limit", "a lone surrogate deep inside", "a lone surrogate in a key",
                       "an unsafe integer", "a number past a double's range", "a negative one, exponent signed"}


def test_body_of_many_small_objects_is_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 16 MiB body of five million empty objects was walked value by value for 5-11 s of the API's CPU."""
    def walk(*_: Any) -> None:
        raise AssertionError("walked")

    monkeypatch.setattr(body, "_walk_with_paths", walk)
    text = json.dumps({"model": "m", "input": [{}] * 100_000, "metadata": {"n": 12345}})
    body.check_json_value(json.loads(text), MAX_DEPTH, text.encode())


def test_refused_body_parsed_in_thread_is_freed_without_garbage_collection(settings: Settings) -> None:
    """A refusal's traceback held the parsed body in reference cycles (the frames and futures it crossed):
    40 refused 1.3 MB WebSocket messages held 900 MB of the API until a full collection."""
    raw = json.dumps({"type": "response.create", "input": [{}] * 10}).encode()
    held: list[weakref.ref[Any]] = []

    class Probe:
        pass

    def refuse(message: dict[str, Any]) -> None:
        message["probe"] = probe = Probe()
        held.append(weakref.ref(probe))
        raise BadRequest("refused")

    async def parse_refused() -> None:
        try:
            await anyio.to_thread.run_sync(body.parse_json_message, raw, settings, refuse)
        except BadRequest:
            pass

    gc.collect()
    gc.disable()
    try:
        anyio.run(parse_refused)
        assert held[0]() is None
    finally:
        gc.enable()
