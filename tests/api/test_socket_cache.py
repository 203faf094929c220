"""A Responses WebSocket's connection-local cache (``api/socket_cache.py``): a continuation of an unstored
response becomes the request a client keeping the conversation itself would send."""

from __future__ import annotations

from oss_responses.api.socket_cache import ConnectionCache, turn_of

ANSWER = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]}


def _cache_with(lane: str | None, **body: object) -> ConnectionCache:
    cache = ConnectionCache()
    cache.remember(lane, turn_of({"model": "m", "input": "hi"} | body, "resp_1", [ANSWER]))
    return cache


def test_expand_replaces_unstored_parent_by_its_input_and_output() -> None:
    cache = _cache_with(None, store=False)
    expanded = cache.expand({"model": "m", "input": "and?", "previous_response_id": "resp_1"})
    assert expanded["previous_response_id"] is None
    assert expanded["input"] == [{"type": "message", "role": "user", "content": "hi"}, ANSWER,
                                 {"type": "message", "role": "user", "content": "and?"}]


def test_expand_keeps_stored_parent_of_unstored_parent() -> None:
    cache = _cache_with(None, store=False, previous_response_id="resp_0")
    expanded = cache.expand({"model": "m", "input": [], "previous_response_id": "resp_1"})
    assert expanded["previous_response_id"] == "resp_0"


def test_expand_leaves_stored_parent_to_sql() -> None:
    body = {"model": "m", "input": "and?", "previous_response_id": "resp_1"}
    assert _cache_with(None).expand(body) is body


def test_expand_finds_parent_on_other_lane() -> None:
    expanded = _cache_with("main", store=False).expand({"input": "fork", "previous_response_id": "resp_1"})
    assert len(expanded["input"]) == 3


def test_remember_keeps_only_latest_response_of_lane() -> None:
    cache = _cache_with(None, store=False)
    cache.remember(None, turn_of({"input": "next", "store": False}, "resp_2", []))
    assert cache.find("resp_1") is None and cache.find("resp_2") is not None


def test_forget_drops_lane_latest_only_when_named() -> None:
    cache = _cache_with("a", store=False)
    cache.forget("b", "resp_1")
    cache.forget("a", "resp_9")
    assert cache.find("resp_1") is not None
    cache.forget("a", "resp_1")
    assert cache.find("resp_1") is None
