"""Microsoft Agent Framework against the service with the scripted engine: its Responses client
(``agent_framework.openai.OpenAIChatClient``) under an ``Agent``, streamed and not, with function tools,
sessions (continued by ``previous_response_id``, by a ``/v1/conversations`` conversation, or by value
with ``store: false``), a structured ``response_format``, and the hosted code interpreter, web search
and MCP tools (the last with and without an approval).

The scripted engine calls the tool named in ``call RECIPIENT {json}``, answers a tool result by
quoting it, and otherwise quotes the user's messages of the conversation (so a continued session shows
its earlier turns).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from agent_framework import Agent, AgentResponse, Message, tool
from agent_framework.openai import OpenAIChatClient
from openai import AsyncOpenAI, NotFoundError
from pydantic import BaseModel
from support import MODEL
from support.client_stack import CALCULATOR_LABEL, Service, call_directive

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

streamed_or_not = pytest.mark.parametrize("streaming", [False, True], ids=["run", "stream"])

CALCULATE = call_directive(f"{CALCULATOR_LABEL}.calculate", expression="1+2")
CALCULATED = f"The tool {CALCULATOR_LABEL}.calculate returned: 3"


@pytest.fixture
def chat_client(async_client: AsyncOpenAI) -> OpenAIChatClient:
    return OpenAIChatClient(model=MODEL, async_client=async_client)


class City(BaseModel):
    name: str
    population: int


@tool
def reverse(text: Annotated[str, "the text to reverse"]) -> str:
    """Reverse a text."""
    return text[::-1]


async def _run(agent: Agent, prompt: str | Message | list[Message], streaming: bool, **options: Any) -> AgentResponse:
    """The agent's response to ``prompt``: run, or streamed and rebuilt from its updates by the framework."""
    if not streaming:
        return await agent.run(prompt, **options)
    stream = agent.run(prompt, stream=True, **options)
    async for _update in stream:
        pass
    return await stream.get_final_response()


def _contents(response: AgentResponse, content_type: str) -> list[Any]:
    return [content for message in response.messages for content in message.contents if content.type == content_type]


@streamed_or_not
async def test_run_answers_with_text(chat_client: OpenAIChatClient, streaming: bool) -> None:
    response = await _run(Agent(client=chat_client), "Hello there", streaming)
    assert response.text == 'You said: "Hello there".'
    assert response.response_id is not None and response.response_id.startswith("resp_")
    assert response.usage_details is not None and response.usage_details["output_token_count"] > 0
    assert [content.text for content in _contents(response, "text_reasoning")] == ['The user said: "Hello there".']


async def test_stream_updates_add_up_to_the_text(chat_client: OpenAIChatClient) -> None:
    stream = Agent(client=chat_client).run("Hello there", stream=True)
    deltas = [content.text async for update in stream for content in update.contents
              if content.type == "text" and content.raw_representation.type == "response.output_text.delta"]
    assert "".join(deltas) == (await stream.get_final_response()).text == 'You said: "Hello there".'


@streamed_or_not
async def test_function_tool_is_called_and_its_result_answered(chat_client: OpenAIChatClient, streaming: bool) -> None:
    agent = Agent(client=chat_client, tools=[reverse])
    response = await _run(agent, call_directive("functions.reverse", text="harmony"), streaming)
    calls = _contents(response, "function_call")
    assert [(call.name, call.arguments) for call in calls] == [("reverse", '{"text": "harmony"}')]
    assert [result.result for result in _contents(response, "function_result")] == ["ynomrah"]
    assert response.text == "The tool functions.reverse returned: ynomrah"


async def test_session_continues_by_previous_response_id(
    chat_client: OpenAIChatClient, async_client: AsyncOpenAI
) -> None:
    agent = Agent(client=chat_client)
    session = agent.create_session()
    first = await agent.run("first turn", session=session)
    second = await agent.run("second turn", session=session)
    assert second.text == 'You said: "second turn". Earlier you said: 1. "first turn"'
    assert session.service_session_id == second.response_id
    stored = await async_client.responses.retrieve(second.response_id)
    assert stored.previous_response_id == first.response_id
    items = await async_client.responses.input_items.list(second.response_id)
    assert [item.content[0].text for item in items.data] == ["second turn"]


@streamed_or_not
async def test_session_continues_a_conversation(
    chat_client: OpenAIChatClient, async_client: AsyncOpenAI, streaming: bool
) -> None:
    conversation = await async_client.conversations.create()
    agent = Agent(client=chat_client)
    session = agent.get_session(conversation.id)
    await _run(agent, "first turn", streaming, session=session)
    second = await _run(agent, "second turn", streaming, session=session)
    assert second.text == 'You said: "second turn". Earlier you said: 1. "first turn"'
    stored = await async_client.responses.retrieve(second.response_id)
    assert stored.conversation is not None and stored.conversation.id == conversation.id
    items = await async_client.conversations.items.list(conversation.id, order="asc")
    assert [item.type for item in items.data].count("message") == 4  # two user messages, two answers


async def test_session_without_store_continues_by_value(
    chat_client: OpenAIChatClient, async_client: AsyncOpenAI
) -> None:
    agent = Agent(client=chat_client)
    session = agent.create_session()
    await agent.run("first turn", session=session, options={"store": False})
    second = await agent.run("second turn", session=session, options={"store": False})
    assert second.text == 'You said: "second turn". Earlier you said: 1. "first turn"'
    with pytest.raises(NotFoundError):
        await async_client.responses.retrieve(second.response_id)


async def test_response_format_returns_model_instance(chat_client: OpenAIChatClient) -> None:
    response = await Agent(client=chat_client).run("a city", options={"response_format": City})
    assert isinstance(response.value, City)
    assert City.model_validate_json(response.text) == response.value


@streamed_or_not
async def test_hosted_code_interpreter_runs_code_and_answers_with_result(
    chat_client: OpenAIChatClient, streaming: bool
) -> None:
    agent = Agent(client=chat_client, tools=[OpenAIChatClient.get_code_interpreter_tool()])
    response = await _run(agent, "call python 123*456", streaming)
    calls = _contents(response, "code_interpreter_tool_call")
    assert [call.inputs[0].text for call in calls] == ["123*456"]
    # Streamed, the framework reads the call's result from `output_item.added` alone (in progress then).
    status = "in_progress" if streaming else "completed"
    assert [result.status for result in _contents(response, "code_interpreter_tool_result")] == [status]
    assert response.text.strip() == "The tool python returned: 56088"  # the tool's output ends its line


@streamed_or_not
async def test_hosted_web_search_searches_and_answers_with_results(
    chat_client: OpenAIChatClient, streaming: bool
) -> None:
    agent = Agent(client=chat_client, tools=[OpenAIChatClient.get_web_search_tool()])
    response = await _run(agent, call_directive("browser.search", query="harmony"), streaming)
    calls = _contents(response, "search_tool_call")
    assert [(call.tool_name, call.arguments) for call in calls] == [("web_search", {"type": "search",
                                                                                    "query": "harmony"})]
    assert response.text.startswith("The tool browser.search returned: [{")
    assert "https://github.com/openai/harmony" in response.text


def _calculator(service: Service, approval_mode: Literal["always_require", "never_require"]) -> Any:
    """The framework's hosted MCP tool for the service's calculator: its configured label and URL."""
    return OpenAIChatClient.get_mcp_tool(name=CALCULATOR_LABEL, url=service.calculator_url,
                                         approval_mode=approval_mode)


@streamed_or_not
async def test_hosted_mcp_tool_is_called_by_the_service(
    chat_client: OpenAIChatClient, service: Service, streaming: bool
) -> None:
    agent = Agent(client=chat_client, tools=[_calculator(service, "never_require")])
    response = await _run(agent, CALCULATE, streaming)
    assert response.text == CALCULATED


async def test_hosted_mcp_approval_is_answered_and_the_call_runs(
    chat_client: OpenAIChatClient, service: Service
) -> None:
    agent = Agent(client=chat_client, tools=[_calculator(service, "always_require")])
    session = agent.create_session()
    asked = await agent.run(CALCULATE, session=session)
    [request] = asked.user_input_requests
    assert request.type == "function_approval_request"
    answer = Message(role="user", contents=[request.to_function_approval_response(approved=True)])
    response = await agent.run(answer, session=session)
    assert response.text == CALCULATED
