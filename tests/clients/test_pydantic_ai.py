"""Pydantic AI (``OpenAIResponsesModel``) against the service with the scripted engine.

The scripted engine calls the tool named in ``call RECIPIENT {json}``, answers a tool result by
quoting it, and otherwise quotes the user's messages of the conversation (so a continued run shows
its earlier turns); structured output gets a deterministic instance of the schema.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent, CodeExecutionTool, MCPServerTool, NativeOutput, WebSearchTool
from pydantic_ai.capabilities import NativeTool
from pydantic_ai.messages import ModelMessage, NativeToolCallPart, NativeToolReturnPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
from pydantic_ai.providers.openai import OpenAIProvider
from support import MODEL
from support.client_stack import CALCULATOR_LABEL, Service, call_directive

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def model(async_client: AsyncOpenAI) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(MODEL, provider=OpenAIProvider(openai_client=async_client))


class City(BaseModel):
    name: str
    population: int


def spell_backwards(word: str) -> str:
    """Spell a word backwards."""
    return word[::-1]


async def _run(agent: Agent[None, str], prompt: str, streaming: bool) -> tuple[str, list[ModelMessage]]:
    if not streaming:
        result = await agent.run(prompt)
        return result.output, result.all_messages()
    async with agent.run_stream(prompt) as streamed:
        output = await streamed.get_output()
    return output, streamed.all_messages()


def _parts(messages: list[ModelMessage]) -> list[Any]:
    return [part for message in messages for part in message.parts]


def _native_returns(messages: list[ModelMessage]) -> list[Any]:
    return [part.content for part in _parts(messages) if isinstance(part, NativeToolReturnPart)]


def _native_calls(messages: list[ModelMessage]) -> list[tuple[str, dict[str, Any]]]:
    return [(part.tool_name, part.args_as_dict()) for part in _parts(messages) if isinstance(part, NativeToolCallPart)]


async def test_run_answers_with_text(model: OpenAIResponsesModel) -> None:
    result = await Agent(model).run("Hello there")
    assert result.output == 'You said: "Hello there".'
    assert result.usage.output_tokens > 0


async def test_run_stream_yields_the_text_run_returns(model: OpenAIResponsesModel) -> None:
    agent = Agent(model)
    async with agent.run_stream("Hello there") as result:
        partials = [text async for text in result.stream_text(debounce_by=None)]
    assert len(partials) > 3
    assert partials[-1] == (await agent.run("Hello there")).output


@pytest.mark.parametrize("streaming", [False, True], ids=["run", "stream"])
async def test_function_tool_is_called_and_its_result_answered(model: OpenAIResponsesModel, streaming: bool) -> None:
    agent = Agent(model, tools=[spell_backwards])
    output, messages = await _run(agent, call_directive("functions.spell_backwards", word="harmony"), streaming)
    assert output == "The tool functions.spell_backwards returned: ynomrah"
    calls = [part for part in _parts(messages) if isinstance(part, ToolCallPart)]
    assert [(c.tool_name, c.args_as_dict()) for c in calls] == [("spell_backwards", {"word": "harmony"})]
    assert [p.content for p in _parts(messages) if isinstance(p, ToolReturnPart)] == ["ynomrah"]


async def test_tool_output_returns_the_forced_calls_arguments(model: OpenAIResponsesModel) -> None:
    # Pydantic AI's default structured output: a final_result tool it forces (tool_choice "required");
    # the scripted model fills the call from the prompt (a real model from the conversation).
    prompt = call_directive("functions.final_result", name="Paris", population=2_100_000)
    result = await Agent(model, output_type=City).run(prompt)
    assert result.output == City(name="Paris", population=2_100_000)


async def test_tool_output_without_arguments_in_prompt_is_instance_of_it(model: OpenAIResponsesModel) -> None:
    # The scripted model fills a forced call the prompt gives no arguments for from its signature.
    result = await Agent(model, output_type=City).run("Paris")
    assert result.output == City(name="Paris", population=0)


async def test_native_output_returns_model_instance(model: OpenAIResponsesModel) -> None:
    # The scripted engine writes a deterministic instance of the schema (its free strings quote the user).
    result = await Agent(model, output_type=NativeOutput(City)).run("Paris")
    assert result.output == City(name="Paris", population=0)


async def test_message_history_continues_the_conversation_by_value(
    model: OpenAIResponsesModel, async_client: AsyncOpenAI
) -> None:
    agent = Agent(model)
    first = await agent.run("My name is Ada.")
    answer = await agent.run("What is my name?", message_history=first.all_messages())
    assert "My name is Ada." in answer.output and "What is my name?" in answer.output
    assert answer.response.provider_response_id is not None
    stored = await async_client.responses.retrieve(answer.response.provider_response_id)
    assert stored.previous_response_id is None
    sent = await async_client.responses.input_items.list(stored.id, order="asc")
    roles = [item.role for item in sent.data if item.type == "message"]
    assert roles[0] == "user" and roles[-1] == "user" and "assistant" in roles


async def test_previous_response_id_auto_continues_the_chain(
    model: OpenAIResponsesModel, async_client: AsyncOpenAI
) -> None:
    # With "auto" Pydantic AI sends only the new message and the last response's id.
    agent = Agent(model, model_settings=OpenAIResponsesModelSettings(openai_previous_response_id="auto"))
    first = await agent.run("My name is Ada.")
    answer = await agent.run("What is my name?", message_history=first.all_messages())
    assert "My name is Ada." in answer.output and "What is my name?" in answer.output
    assert answer.response.provider_response_id is not None
    stored = await async_client.responses.retrieve(answer.response.provider_response_id)
    assert stored.previous_response_id == first.response.provider_response_id
    sent = await async_client.responses.input_items.list(stored.id)
    assert [item.type for item in sent.data] == ["message"]


async def test_reasoning_is_returned_and_sent_back(model: OpenAIResponsesModel) -> None:
    settings = OpenAIResponsesModelSettings(openai_reasoning_effort="low", openai_reasoning_summary="detailed")
    agent = Agent(model, model_settings=settings)
    first = await agent.run("My name is Ada.")
    assert [part for part in _parts(first.all_messages()) if part.part_kind == "thinking"]
    answer = await agent.run("What is my name?", message_history=first.all_messages())
    assert "My name is Ada." in answer.output


@pytest.mark.parametrize("streaming", [False, True], ids=["run", "stream"])
async def test_native_web_search_searches_and_answers_with_results(
    model: OpenAIResponsesModel, streaming: bool
) -> None:
    settings = OpenAIResponsesModelSettings(openai_include_web_search_sources=True)
    agent = Agent(model, capabilities=[NativeTool(WebSearchTool())], model_settings=settings)
    output, messages = await _run(agent, call_directive("browser.search", query="harmony"), streaming)
    assert output.startswith("The tool browser.search returned: [{")
    assert [name for name, _ in _native_calls(messages)] == ["web_search"]
    assert _native_returns(messages) == [{"status": "completed",
                                          "sources": [{"type": "url", "url": "https://github.com/openai/harmony"}]}]


@pytest.mark.parametrize("streaming", [False, True], ids=["run", "stream"])
async def test_native_code_execution_runs_code_and_answers_with_result(
    model: OpenAIResponsesModel, streaming: bool
) -> None:
    settings = OpenAIResponsesModelSettings(openai_include_code_execution_outputs=True)
    agent = Agent(model, capabilities=[NativeTool(CodeExecutionTool())], model_settings=settings)
    output, messages = await _run(agent, "call python 123*456", streaming)
    assert output.strip() == "The tool python returned: 56088"
    assert [(name, args.get("code")) for name, args in _native_calls(messages)] == [("code_execution", "123*456")]
    assert _native_returns(messages) == [{"status": "completed", "logs": ["56088\n"]}]


@pytest.mark.parametrize("streaming", [False, True], ids=["run", "stream"])
async def test_native_mcp_server_tool_is_called_by_the_service_and_the_run_continues(
    model: OpenAIResponsesModel, service: Service, streaming: bool
) -> None:
    agent = Agent(model, capabilities=[NativeTool(MCPServerTool(id=CALCULATOR_LABEL, url=service.calculator_url))])
    prompt = call_directive(f"{CALCULATOR_LABEL}.calculate", expression="1+2")
    output, messages = await _run(agent, prompt, streaming)
    assert output == f"The tool {CALCULATOR_LABEL}.calculate returned: 3"
    # The next run sends the MCP call back (by value) with the history.
    answer = await agent.run("thanks", message_history=messages)
    assert answer.output == f'You said: "thanks". Earlier you said: 1. {json.dumps(prompt)}'
