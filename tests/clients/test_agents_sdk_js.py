"""The Agents SDK for JavaScript (``@openai/agents``) against the service with the scripted engine.

Unlike the Python SDK it checks what it reads with zod: a streamed run validates the finished
Response's usage (every input and output token detail must be a number). The scripted engine calls
the tool named in ``call RECIPIENT {json}`` and then answers by quoting the tool's result.

Every test runs over HTTP and over the Responses WebSocket (``OpenAIResponsesWSModel``, on Node's
global ``WebSocket``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from support.client_stack import Service, call_directive
from support.js_clients import missing_js_client, run_js
from support.node import require_client


@pytest.fixture(scope="module", autouse=True)
def agents_sdk_installed() -> None:
    require_client("the Agents SDK for JavaScript", missing_js_client("@openai/agents"))


RunAgent = Callable[..., dict[str, Any]]


@pytest.fixture(params=["http", "websocket"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def run_agent(service: Service, transport: str) -> RunAgent:
    def run(prompt: str, *, stream: bool = False, **scenario: Any) -> dict[str, Any]:
        """One ``run`` of an agent named speller (``tools``: with spell_backwards; ``output_type``: answers
        ``{spelling}``; ``handoff``: may hand off to an agent named helper). Its result, or its error."""
        return run_js("agents_js_run.mjs", service.base_url, input=prompt, stream=stream, transport=transport,
                      **scenario)

    return run


def test_run_answers_plain_prompt(run_agent: RunAgent) -> None:
    result = run_agent("Hello there")
    assert result.get("final_output") == 'You said: "Hello there".', result


def test_run_streamed_answers_plain_prompt(run_agent: RunAgent) -> None:
    result = run_agent("Hello there", stream=True)
    assert result.get("final_output") == 'You said: "Hello there".', result
    assert result["events"] > 0


def test_run_streamed_calls_function_tool_and_answers_with_result(run_agent: RunAgent) -> None:
    result = run_agent(call_directive("functions.spell_backwards", word="stream"), stream=True, tools=True)
    assert result.get("final_output") == "The tool functions.spell_backwards returned: maerts", result
    assert result["items"] == ["reasoning_item", "tool_call_item", "tool_call_output_item",
                               "reasoning_item", "message_output_item"]


def test_run_streamed_with_output_type_answers_tool_result_as_instance_of_it(run_agent: RunAgent) -> None:
    result = run_agent(call_directive("functions.spell_backwards", word="harmony"), stream=True,
                       tools=True, output_type=True)
    assert result.get("final_output") == {"spelling": "The tool functions.spell_backwards returned: ynomrah"}, result


def test_run_streamed_hands_off_to_agent_that_answers(run_agent: RunAgent) -> None:
    result = run_agent(call_directive("functions.transfer_to_helper"), stream=True, handoff=True)
    assert result.get("last_agent") == "helper", result
    assert result["final_output"] == 'The tool functions.transfer_to_helper returned: {"assistant":"helper"}'


def test_run_with_code_interpreter_tool_runs_code_as_hosted_call(run_agent: RunAgent) -> None:
    # The SDK turns the code_interpreter_call item into a hosted tool call; its history sends the item
    # back in the second turn (outputs [] when include did not ask for them).
    result = run_agent("call python 123*456", code_interpreter=True, follow_up="thanks")
    assert result.get("hosted") == [{"name": "code_interpreter_call", "code": "123*456", "status": "completed"}], result
    assert result["final_output"].strip() == "The tool python returned: 56088"
    assert result["follow_up_output"] == 'You said: "thanks". Earlier you said: 1. "call python 123*456"'


@pytest.mark.parametrize("memory", ["session", "conversation_id"])
def test_run_remembers_earlier_turn_kept_in_conversation(run_agent: RunAgent, memory: str) -> None:
    # "session": OpenAIConversationsSession keeps the items in /v1/conversations and sends them back;
    # "conversation_id": the SDK sends each turn's new items, the service puts the conversation first.
    result = run_agent("The password is swordfish", memory=memory, follow_up="What was the password?")
    assert result.get("follow_up_output") == \
        'You said: "What was the password?". Earlier you said: 1. "The password is swordfish"', result


@pytest.mark.parametrize("memory", ["session", "conversation_id"])
def test_run_streamed_calls_function_tool_in_conversation(run_agent: RunAgent, memory: str) -> None:
    prompt = call_directive("functions.spell_backwards", word="harmony")
    result = run_agent(prompt, tools=True, stream=True, memory=memory)
    assert result.get("final_output") == "The tool functions.spell_backwards returned: ynomrah", result
