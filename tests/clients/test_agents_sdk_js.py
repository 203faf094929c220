"""The Agents SDK for JavaScript (``@openai/agents``) against the service with the scripted engine.

Unlike the Python SDK it checks what it reads with zod: a streamed run validates the finished
Response's usage (every input and output token detail must be a number). The scripted engine calls
the tool named in ``call RECIPIENT {json}`` and then answers by quoting the tool's result.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.client_stack import Service
from support.js_clients import missing_js_client, run_js

if (reason := missing_js_client("@openai/agents")) is not None:
    pytest.skip(f"the Agents SDK for JavaScript cannot run: {reason}", allow_module_level=True)


def run_agent(base_url: str, prompt: str, *, stream: bool = False, **scenario: Any) -> dict[str, Any]:
    """One ``run`` of an agent named speller (``tools``: with spell_backwards; ``output_type``: answers
    ``{spelling}``; ``handoff``: may hand off to an agent named helper). Its result, or its error."""
    return run_js("agents_js_run.mjs", base_url, input=prompt, stream=stream, **scenario)


def _call(recipient: str, **arguments: object) -> str:
    return f"call {recipient} {json.dumps(arguments)}"


def test_run_answers_plain_prompt(service: Service) -> None:
    result = run_agent(service.base_url, "Hello there")
    assert result.get("final_output") == 'You said: "Hello there".', result


def test_run_streamed_answers_plain_prompt(service: Service) -> None:
    result = run_agent(service.base_url, "Hello there", stream=True)
    assert result.get("final_output") == 'You said: "Hello there".', result
    assert result["events"] > 0


def test_run_streamed_calls_function_tool_and_answers_with_result(service: Service) -> None:
    result = run_agent(service.base_url, _call("functions.spell_backwards", word="stream"), stream=True, tools=True)
    assert result.get("final_output") == "The tool functions.spell_backwards returned: maerts", result
    assert result["items"] == ["reasoning_item", "tool_call_item", "tool_call_output_item",
                               "reasoning_item", "message_output_item"]


def test_run_streamed_with_output_type_answers_tool_result_as_instance_of_it(service: Service) -> None:
    result = run_agent(service.base_url, _call("functions.spell_backwards", word="harmony"), stream=True,
                       tools=True, output_type=True)
    assert result.get("final_output") == {"spelling": "The tool functions.spell_backwards returned: ynomrah"}, result


def test_run_streamed_hands_off_to_agent_that_answers(service: Service) -> None:
    result = run_agent(service.base_url, _call("functions.transfer_to_helper"), stream=True, handoff=True)
    assert result.get("last_agent") == "helper", result
    assert result["final_output"] == 'The tool functions.transfer_to_helper returned: {"assistant":"helper"}'
