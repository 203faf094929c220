"""The Vercel AI SDK (``ai`` with ``@ai-sdk/openai``'s Responses model) against the service with the
scripted engine, each test on its two majors: ``ai`` 6 with ``@ai-sdk/openai`` 3, ``ai`` 7 with 4.

It keeps the conversation itself: each request sends the earlier turns as input, and with ``store`` on
(its default) it names the earlier output items it got back (reasoning, messages) by ``item_reference``,
with no ``previous_response_id``. The scripted engine calls the tool named in ``call RECIPIENT {json}``,
then quotes the tool's result; otherwise it quotes the user's messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.client_stack import Service
from support.js_clients import AI_SDK_7_PACKAGES, PACKAGES, missing_js_client, run_js
from support.node import require_client

SPELL = "call functions.spell_backwards " + json.dumps({"word": "harmony"})
SPELLED = "The tool functions.spell_backwards returned: ynomrah"


@dataclass(frozen=True)
class AiSdk:
    """One major of the SDK, installed in ``packages``, talking to ``service``."""

    service: Service
    packages: Path

    def run(self, *prompts: str, **scenario: Any) -> dict[str, Any]:
        """The prompts as turns of one chat; what the script printed."""
        return run_js("vercel_ai_run.mjs", self.service.base_url, packages=self.packages, prompts=list(prompts),
                      **scenario)


@pytest.fixture(scope="module", params=[PACKAGES, AI_SDK_7_PACKAGES], ids=["ai6", "ai7"])
def ai_sdk(request: pytest.FixtureRequest, service: Service) -> AiSdk:
    require_client("the Vercel AI SDK", missing_js_client("@ai-sdk/openai", request.param))
    return AiSdk(service, request.param)


def test_generate_text_answers_plain_prompt(ai_sdk: AiSdk) -> None:
    assert ai_sdk.run("Hello there") == {"texts": ['You said: "Hello there".'], "steps": 1}


def test_generate_text_runs_tool_loop_naming_reasoning_by_reference(ai_sdk: AiSdk) -> None:
    # Its second step sends the first step's reasoning item as an item_reference.
    assert ai_sdk.run(SPELL, tools=True) == {"texts": [SPELLED], "steps": 2}


def test_stream_text_runs_tool_loop(ai_sdk: AiSdk) -> None:
    assert ai_sdk.run(SPELL, tools=True, stream=True) == {"texts": [SPELLED], "steps": 2}


def test_generate_text_continues_conversation_sent_as_messages(ai_sdk: AiSdk) -> None:
    result = ai_sdk.run("first", "second")
    assert result.get("texts", [None])[-1] == 'You said: "second". Earlier you said: 1. "first"', result


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_text_in_conversation_remembers_earlier_turn_it_did_not_send(ai_sdk: AiSdk, stream: bool) -> None:
    # The provider's `conversation`: each turn sends its own prompt; the service puts the earlier turns first.
    result = ai_sdk.run("first", "second", conversation=True, stream=stream)
    assert result.get("texts") == ['You said: "first".', 'You said: "second". Earlier you said: 1. "first"'], result


def test_generate_text_in_conversation_runs_tool_loop(ai_sdk: AiSdk) -> None:
    # The second step leaves out the call (it has an id: the conversation holds it) but sends the turn's
    # prompt again (it has none), so the conversation holds that prompt twice, as OpenAI's would.
    result = ai_sdk.run(SPELL, "thanks", tools=True, conversation=True)
    assert result.get("texts", [None])[0] == SPELLED and result.get("steps") == 3, result
    quoted = json.dumps(SPELL)
    assert result["texts"][1] == f'You said: "thanks". Earlier you said: 1. {quoted} 2. {quoted}'


def test_generate_text_without_store_runs_tool_loop(ai_sdk: AiSdk) -> None:
    assert ai_sdk.run(SPELL, tools=True, store=False) == {"texts": [SPELLED], "steps": 2}


def test_generate_object_answers_instance_of_schema(ai_sdk: AiSdk) -> None:
    assert ai_sdk.run("harmony", object=True) == {"object": {"spelling": "harmony"}}


HARMONY_SEARCHED = {"tool": "web_search", "output": {
    "action": {"type": "search", "query": "harmony"}, "sources": [{"type": "url", "url": "https://github.com/openai/harmony"}]}}


@pytest.mark.parametrize("stream", [False, True])
def test_text_with_web_search_quotes_search_result_and_lists_its_sources(ai_sdk: AiSdk, stream: bool) -> None:
    # The service's browser answers through MCP; the response holds a web_search_call item, as OpenAI's,
    # whose action lists the result's URLs (the SDK asks for web_search_call.action.sources).
    result = ai_sdk.run('call browser.search {"query": "harmony"}', web_search=True, stream=stream)
    assert result.get("texts", [""])[0].startswith("The tool browser.search returned: [{"), result
    assert result["hosted"][-1] == HARMONY_SEARCHED


@pytest.mark.parametrize("store", [True, False])
def test_generate_text_continues_conversation_after_web_search(ai_sdk: AiSdk, store: bool) -> None:
    # The second turn sends the first turn's web_search_call back: by item_reference with store on,
    # whole with store off.
    result = ai_sdk.run('call browser.search {"query": "harmony"}', "thanks", web_search=True, store=store)
    assert result.get("texts", [None])[-1] == 'You said: "thanks". Earlier you said: 1. "call browser.search ' \
        '{\\"query\\": \\"harmony\\"}"', result


def test_generate_text_with_web_search_tool_choice_searches(ai_sdk: AiSdk) -> None:
    # toolChoice {type: "tool", toolName: "web_search"}: {"type": "web_search"} on the wire; "harmony"
    # asks for no call, the choice makes the model search.
    result = ai_sdk.run("harmony", web_search=True, tool_choice="web_search")
    assert result.get("texts", [""])[0].startswith("The tool browser.search returned: [{"), result


CODE = "call python 123*456"


def code_call(code: str, logs: str) -> list[dict[str, Any]]:
    """The SDK's view of one code interpreter call: its code and logs (its container id left out)."""
    return [{"tool": "code_interpreter", "input": {"code": code}},
            {"tool": "code_interpreter", "output": {"outputs": [{"type": "logs", "logs": logs}]}}]


def without_containers(result: dict[str, Any]) -> dict[str, Any]:
    """The result with each call's container id checked (one the service named) and dropped."""
    for part in result.get("hosted", []):
        if "input" in part:
            assert part["input"].pop("containerId", "").startswith("cntr_"), result
    return result


@pytest.mark.parametrize("stream", [False, True])
def test_text_with_code_interpreter_shows_code_and_its_logs(ai_sdk: AiSdk, stream: bool) -> None:
    # Its codeInterpreter tool: the service's python runs the code; the SDK reads the code_interpreter_call
    # item (and, streaming, its code deltas) and asks for its outputs by include.
    result = without_containers(ai_sdk.run(CODE, code_interpreter=True, stream=stream))
    assert result == {"texts": ["The tool python returned: 56088\n"], "steps": 1,
                      "hosted": code_call("123*456", "56088\n")}


def test_generate_text_with_code_interpreter_tool_choice_runs_code(ai_sdk: AiSdk) -> None:
    # toolChoice naming codeInterpreter: {"type": "code_interpreter"} on the wire. The SDK checks that a
    # code_interpreter_call came back (ToolChoiceViolationError while the call was an mcp_call).
    result = without_containers(ai_sdk.run("hello", code_interpreter=True, tool_choice="code_interpreter"))
    assert result == {"texts": ["The tool python returned: 2\n"], "steps": 1, "hosted": code_call("1+1", "2\n")}


@pytest.mark.parametrize("store", [True, False])
def test_generate_text_continues_conversation_after_code_interpreter(ai_sdk: AiSdk, store: bool) -> None:
    # With store on the second turn names the code_interpreter_call by item_reference; off, the SDK
    # leaves a call its provider ran out.
    result = ai_sdk.run(CODE, "thanks", code_interpreter=True, store=store)
    assert result.get("hosted", [{}])[0].get("input", {}).get("code") == "123*456", result
    assert result.get("texts", [None])[-1] == 'You said: "thanks". Earlier you said: 1. "call python 123*456"', result


def test_generate_text_with_allowed_tools_calls_tool_it_lists(ai_sdk: AiSdk) -> None:
    # providerOptions.openai.allowedTools: tool_choice {"type": "allowed_tools", ...} on the wire.
    shout = "call functions.shout " + json.dumps({"word": "hey"})
    result = ai_sdk.run(shout, tools=True, allowed_tools=["shout"])
    assert result == {"texts": ["The tool functions.shout returned: HEY"], "steps": 2}


def test_generate_text_with_allowed_tools_answers_call_to_tool_left_out(ai_sdk: AiSdk) -> None:
    result = ai_sdk.run(SPELL, tools=True, allowed_tools=["shout"])
    assert result.get("steps") == 1, result
    assert "There is no tool 'functions.spell_backwards'" in result["texts"][0]
