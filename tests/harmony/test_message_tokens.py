"""MessageTokens: a prompt assembled from kept message renders is the prompt harmony renders whole."""

from __future__ import annotations

from typing import Any

import pytest
from openai_harmony import HarmonyEncoding, Message
from support.harmony_transcripts import SCENARIOS, run_scenario

from oss_responses.harmony.message_tokens import MessageTokens, declares_function_tools
from oss_responses.harmony.render import (
    ConversationTurn,
    McpToolSpec,
    RenderOptions,
    plan_conversation,
    tokenize_messages,
)
from oss_responses.requests import parse_create_request

OPTIONS = RenderOptions(
    conversation_start_date="2026-12-04",
    knowledge_cutoff="2024-06",
    default_reasoning_effort="medium",
    builtin_tool_labels={"code_interpreter": "python", "web_search_preview": "browser"},
    mcp_tools={"calc": [McpToolSpec("add", "Add two numbers", {"type": "object"})]},
)
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _messages(encoding: HarmonyEncoding, scenario: str, **body: Any) -> list[dict[str, Any]]:
    """A prompt's message dicts as the worker renders them: a stored turn of ``scenario``, then ``body``'s input."""
    run = run_scenario(encoding, SCENARIOS[scenario])
    turn = ConversationTurn([{"role": "user", "name": None, "content": [{"type": "text", "text": "hello"}]}],
                            dict(run.translator.function_calls))
    turn.messages += run.translator.output_messages
    request = parse_create_request({"model": "gpt-oss-20b", **body})
    return [message.to_dict() for message in plan_conversation(request, [turn], OPTIONS).messages]


PROMPTS = {
    "no tools": ("reasoning_final", {"input": "again", "instructions": "Be brief."}),
    "function tools": ("function_call", {"input": "and Paris?", "tools": [WEATHER]}),
    "builtins and MCP": ("mcp_code_interpreter", {
        "input": "thanks", "tools": [{"type": "code_interpreter", "container": {"type": "auto"}},
                                     {"type": "mcp", "server_label": "calc", "server_url": "http://calc.test/mcp"}]}),
    "response format": ("no_tools", {"input": "list", "text": {"format": {
        "type": "json_schema", "name": "l", "schema": {"type": "object", "properties": {}}}}}),
}


@pytest.mark.parametrize("for_completion", [True, False])
@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_tokenize_equals_whole_render_cold_and_warm(encoding: HarmonyEncoding, name: str, for_completion: bool) -> None:
    scenario, body = PROMPTS[name]
    messages = _messages(encoding, scenario, **body)
    kept = MessageTokens(encoding, max_bytes=1 << 20)
    whole = tokenize_messages(messages, for_completion, encoding)
    assert kept.tokenize(messages, for_completion=for_completion) == whole
    assert kept.tokenize(messages, for_completion=for_completion) == whole


def test_tokenize_renders_only_messages_not_kept(encoding: HarmonyEncoding) -> None:
    messages = _messages(encoding, "function_call", input="and Paris?", tools=[WEATHER])
    kept = MessageTokens(encoding, max_bytes=1 << 20)
    kept.tokenize(messages[:-1], for_completion=True)
    rendered: list[list[dict[str, Any]]] = []

    def render(missing: list[dict[str, Any]], function_tools: bool) -> list[list[int]]:
        rendered.append(missing)
        return [list(encoding.render(Message.from_dict(m))) for m in missing]

    kept.tokenize(messages, for_completion=True, render_missing=render)
    assert rendered == [[messages[-1]]]


def test_kept_system_message_is_not_reused_across_function_tools_option(encoding: HarmonyEncoding) -> None:
    """harmony's system message names the ``functions`` channel only when a developer message declares
    functions: the same message dict renders two ways."""
    with_functions = _messages(encoding, "function_call", input="x", tools=[WEATHER])
    without = [message for message in with_functions if message["role"] != "developer"]
    assert declares_function_tools(with_functions) and not declares_function_tools(without)
    kept = MessageTokens(encoding, max_bytes=1 << 20)
    assert kept.tokenize(with_functions, for_completion=True) == tokenize_messages(with_functions, True, encoding)
    assert kept.tokenize(without, for_completion=True) == tokenize_messages(without, True, encoding)


def test_budget_drops_least_recently_used_message(encoding: HarmonyEncoding) -> None:
    one, two, three = ({"role": "user", "name": None, "content": [{"type": "text", "text": text * 200}]}
                       for text in ("a ", "b ", "c "))
    sizer = MessageTokens(encoding, max_bytes=1 << 20)
    sizer.tokenize([one], for_completion=False)
    budget = sizer.size_bytes * 5 // 2  # room for two of them
    kept = MessageTokens(encoding, max_bytes=budget)
    kept.tokenize([one], for_completion=False)
    kept.tokenize([two], for_completion=False)
    kept.tokenize([one], for_completion=False)  # now the most recent
    kept.tokenize([three], for_completion=False)
    missing: list[dict[str, Any]] = []

    def render(messages: list[dict[str, Any]], function_tools: bool) -> list[list[int]]:
        missing.extend(messages)
        return [[0] for _ in messages]

    kept.tokenize([one, two, three], for_completion=False, render_missing=render)
    assert missing == [two]
    assert kept.size_bytes <= budget


def test_zero_budget_keeps_nothing_and_still_tokenizes(encoding: HarmonyEncoding) -> None:
    messages = _messages(encoding, "no_tools", input="hi")
    kept = MessageTokens(encoding, max_bytes=0)
    assert kept.tokenize(messages, for_completion=True) == tokenize_messages(messages, True, encoding)
    assert kept.size_bytes == 0
