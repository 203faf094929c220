"""LiteLLM against the service with the scripted engine: its Responses calls (``litellm.responses``,
``aresponses``, ``get_responses``, ``delete_responses``) and its bridge that serves Chat Completions calls
through a Responses endpoint (``litellm.completion`` with a model named ``openai/responses/...``), the way
a LiteLLM gateway in front of the service calls it.

The scripted engine calls the tool named in ``call RECIPIENT {json}``, answers a tool result by
quoting it, and otherwise quotes the user's messages of the conversation (so a continued chain shows
its earlier turns).

LiteLLM is imported by a fixture: every test process collects this module, and importing LiteLLM takes
~4 s of CPU that only the process running these tests needs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from openai import NotFoundError, OpenAI
from support import MODEL
from support.client_stack import Service, call_directive

pytestmark = pytest.mark.timeout(60)

REVERSE_PARAMETERS = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
RESPONSES_TOOLS = [{"type": "function", "name": "reverse", "description": "Reverse a text.",
                    "parameters": REVERSE_PARAMETERS}]
CHAT_TOOLS = [{"type": "function", "function": {"name": "reverse", "description": "Reverse a text.",
                                                "parameters": REVERSE_PARAMETERS}}]
CALL_REVERSE = call_directive("functions.reverse", text="harmony")


@pytest.fixture(scope="module")
def litellm() -> ModuleType:
    import litellm

    return litellm


@pytest.fixture
def routed(service: Service) -> dict[str, Any]:
    """The arguments that send a LiteLLM Responses call to the service (its OpenAI provider)."""
    return {"model": f"openai/{MODEL}", "api_base": service.base_url, "api_key": "unused", "num_retries": 0}


@pytest.fixture
def bridged(service: Service) -> dict[str, Any]:
    """The arguments that send a LiteLLM Chat Completions call to the service's Responses endpoint."""
    return {"model": f"openai/responses/{MODEL}", "api_base": service.base_url, "api_key": "unused",
            "num_retries": 0}


@pytest.fixture
def client(service: Service) -> Iterator[OpenAI]:
    """The openai SDK on the same service, to read back what LiteLLM sent."""
    with OpenAI(base_url=service.base_url, api_key="unused", max_retries=0) as client:
        yield client


def _service_id(litellm_id: str) -> str:
    """The service's own id of a response LiteLLM returned: LiteLLM hands out ids of its own (the
    service's id with its provider, base64-encoded) and turns them back when they are sent through it."""
    from litellm.responses.utils import ResponsesAPIRequestUtils

    return ResponsesAPIRequestUtils.decode_previous_response_id_to_original_previous_response_id(litellm_id)


def _completion_text(litellm: ModuleType, messages: list[Any], stream: bool, **arguments: Any) -> str:
    """The answer's text of a Chat Completions call through LiteLLM, streamed (its chunks joined) or not."""
    if not stream:
        return litellm.completion(messages=messages, **arguments).choices[0].message.content
    return "".join(chunk.choices[0].delta.content or ""
                   for chunk in litellm.completion(messages=messages, stream=True, **arguments))


def test_responses_answers_with_text(litellm: ModuleType, routed: dict[str, Any]) -> None:
    response = litellm.responses(input="Hello there", **routed)
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.output_text == 'You said: "Hello there".'
    assert response.usage.output_tokens > 0


def test_responses_stream_deltas_add_up_to_the_completed_text(litellm: ModuleType, routed: dict[str, Any]) -> None:
    events = list(litellm.responses(input="Hello there", stream=True, **routed))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text == 'You said: "Hello there".'


def test_aresponses_answers_with_text(litellm: ModuleType, routed: dict[str, Any]) -> None:
    response = asyncio.run(litellm.aresponses(input="Hello there", **routed))
    assert response.output_text == 'You said: "Hello there".'


def test_responses_tool_loop_continues_by_previous_response_id(litellm: ModuleType, routed: dict[str, Any]) -> None:
    called = litellm.responses(input=CALL_REVERSE, tools=RESPONSES_TOOLS, **routed)
    [call] = [item for item in called.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("reverse", {"text": "harmony"})
    answer = litellm.responses(input=[{"type": "function_call_output", "call_id": call.call_id, "output": "ynomrah"}],
                               previous_response_id=called.id, tools=RESPONSES_TOOLS, **routed)
    assert answer.output_text == "The tool functions.reverse returned: ynomrah"


def test_responses_previous_response_id_continues_the_chain(
    litellm: ModuleType, routed: dict[str, Any], client: OpenAI
) -> None:
    first = litellm.responses(input="My name is Ada.", **routed)
    answer = litellm.responses(input="What is my name?", previous_response_id=first.id, **routed)
    assert answer.output_text == 'You said: "What is my name?". Earlier you said: 1. "My name is Ada."'
    assert client.responses.retrieve(_service_id(answer.id)).previous_response_id == _service_id(first.id)


def test_get_responses_then_delete_responses(litellm: ModuleType, routed: dict[str, Any], client: OpenAI) -> None:
    created = litellm.responses(input="Hello there", **routed)
    stored = litellm.get_responses(response_id=created.id, **routed)
    assert (stored.id, stored.status, stored.output_text) == (created.id, "completed", created.output_text)
    deleted = litellm.delete_responses(response_id=created.id, **routed)
    assert (deleted.id, deleted.deleted) == (_service_id(created.id), True)
    with pytest.raises(NotFoundError):
        client.responses.retrieve(_service_id(created.id))


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_completion_bridge_answers_with_text(litellm: ModuleType, bridged: dict[str, Any], stream: bool) -> None:
    text = _completion_text(litellm, [{"role": "user", "content": "Hello there"}], stream, **bridged)
    assert text == 'You said: "Hello there".'


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_completion_bridge_tool_loop_calls_tool_then_answers_with_result(
    litellm: ModuleType, bridged: dict[str, Any], stream: bool
) -> None:
    # The bridge sends the whole chat each turn: the assistant's call (and its reasoning item) by value.
    messages: list[Any] = [{"role": "user", "content": CALL_REVERSE}]
    called = litellm.completion(messages=messages, tools=CHAT_TOOLS, **bridged).choices[0].message
    [call] = called.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("reverse", {"text": "harmony"})
    messages += [called.model_dump(), {"role": "tool", "tool_call_id": call.id, "content": "ynomrah"}]
    text = _completion_text(litellm, messages, stream, tools=CHAT_TOOLS, **bridged)
    assert text == "The tool functions.reverse returned: ynomrah"
