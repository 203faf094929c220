"""A browser call of a hosted web search tool streams as a ``web_search_call``, as OpenAI streams it."""

from __future__ import annotations

import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter
from support.harmony_transcripts import make_response

from oss_responses.harmony.hosted_items import HostedCalls, web_search_action, web_search_sources
from oss_responses.harmony.translator import ResponseTranslator

EVENT = TypeAdapter(ResponseStreamEvent)


def _translator(encoding, hosted: frozenset[str] = frozenset({"browser"}), sources: bool = False) -> ResponseTranslator:
    translator = ResponseTranslator(make_response(), encoding=encoding, first_sequence_number=1,
                                    mcp_labels={"browser": "web_search"}, hosted_builtins=hosted,
                                    hosted_calls=HostedCalls(search_sources=sources))
    translator.start()
    return translator


def _search(encoding, query: str = "harmony") -> list[int]:
    text = f'<|channel|>analysis to=browser.search <|constrain|>json<|message|>{{"query": "{query}"}}<|call|>'
    return encoding.encode(text, allowed_special="all")


def _kinds(events: list) -> list[str]:
    return [event.type for event in events]


def test_search_streams_nothing_until_call_then_searching(encoding) -> None:
    translator = _translator(encoding)
    events = translator.feed(_search(encoding))
    assert _kinds(events) == ["response.output_item.added", "response.web_search_call.in_progress",
                              "response.web_search_call.searching"]
    added = events[0].item
    assert (added.type, added.status, added.action.type, added.action.query) == (
        "web_search_call", "in_progress", "search", "harmony")
    assert all(EVENT.validate_python(event.model_dump()) for event in events)


def test_search_result_completes_item_and_reaches_model(encoding) -> None:
    translator = _translator(encoding)
    translator.feed(_search(encoding))
    call = translator.pending_tool_call
    assert (call.kind, call.server_label, call.name) == ("mcp", "web_search", "search")
    events = translator.feed_tool_result('[{"title": "Harmony"}]')
    assert _kinds(events) == ["response.web_search_call.completed", "response.output_item.done"]
    assert events[-1].item.status == "completed" and events[-1].item.id.startswith("ws_")
    assert translator.output_messages[-1]["content"][0]["text"] == '[{"title": "Harmony"}]'


def test_failed_search_ends_item_failed(encoding) -> None:
    translator = _translator(encoding)
    translator.feed(_search(encoding))
    events = translator.feed_tool_result(None, "unreachable")
    assert _kinds(events) == ["response.output_item.done"] and events[0].item.status == "failed"


def test_cancel_while_searching_ends_item_incomplete(encoding) -> None:
    translator = _translator(encoding)
    translator.feed(_search(encoding))
    translator.finish("abort")
    [item] = translator.response.output
    assert (item.type, item.status, translator.response.status) == ("web_search_call", "incomplete", "cancelled")


def test_search_cut_before_call_shows_no_item(encoding) -> None:
    translator = _translator(encoding)
    assert translator.feed(_search(encoding)[:-3]) == []
    translator.finish("length")
    assert translator.response.output == [] and translator.response.status == "incomplete"


def test_browser_of_mcp_label_stays_mcp_call(encoding) -> None:
    translator = _translator(encoding, hosted=frozenset())
    events = translator.feed(_search(encoding))
    assert events[0].item.type == "mcp_call" and "response.mcp_call.in_progress" in _kinds(events)


@pytest.mark.parametrize(("name", "arguments", "action"), [
    ("search", '{"query": "q"}', {"type": "search", "query": "q"}),
    ("search", "plain words", {"type": "search", "query": "plain words"}),
    ("open", '{"id": "https://example.com/a"}', {"type": "open_page", "url": "https://example.com/a"}),
    ("open", '{"id": 3}', {"type": "open_page"}),
    ("find", '{"pattern": "gpt"}', {"type": "find_in_page", "pattern": "gpt", "url": ""}),
])
def test_web_search_action_of_browser_call(name: str, arguments: str, action: dict) -> None:
    assert web_search_action(name, arguments).model_dump(exclude_none=True) == action


RESULT = '[{"id": "mcp", "url": "https://modelcontextprotocol.io"}, {"id": "h", "url": "https://github.com/openai/harmony"}]'


def test_search_result_sources_asked_for_are_its_urls(encoding) -> None:
    translator = _translator(encoding, sources=True)
    assert translator.feed(_search(encoding))[0].item.action.sources is None  # not known before the result
    done = translator.feed_tool_result(RESULT)[-1].item
    assert [source.url for source in done.action.sources] == ["https://modelcontextprotocol.io",
                                                              "https://github.com/openai/harmony"]


def test_search_result_sources_not_asked_for_are_left_out(encoding) -> None:
    translator = _translator(encoding)
    translator.feed(_search(encoding))
    assert translator.feed_tool_result(RESULT)[-1].item.action.sources is None


def test_open_page_has_no_sources(encoding) -> None:
    translator = _translator(encoding, sources=True)
    opening = '<|channel|>analysis to=browser.open <|constrain|>json<|message|>{"id": 0}<|call|>'
    translator.feed(encoding.encode(opening, allowed_special="all"))
    done = translator.feed_tool_result("https://example.com/page")[-1].item
    assert done.action.type == "open_page" and not hasattr(done.action, "sources")


@pytest.mark.parametrize(("result", "urls"), [
    (RESULT, ["https://modelcontextprotocol.io", "https://github.com/openai/harmony"]),
    ("【0†Harmony†https://github.com/openai/harmony】 and 【1†Again†https://github.com/openai/harmony】",
     ["https://github.com/openai/harmony"]),
    ("See https://example.com/a, then (https://example.com/b).", ["https://example.com/a", "https://example.com/b"]),
    ("no links here", []),
])
def test_web_search_sources_are_urls_of_result_each_once(result: str, urls: list[str]) -> None:
    assert [source.url for source in web_search_sources(result)] == urls
