"""The OpenAI Agents SDK (``openai-agents``, Python) against the service with the scripted engine.

The SDK's model is ``OpenAIResponsesModel`` (HTTP) or ``OpenAIResponsesWSModel`` (the Responses
WebSocket), every test once each, on an ``AsyncOpenAI`` client whose base_url is the service; tracing
is off (it would upload to OpenAI). The scripted engine calls the tool named in
``call RECIPIENT {json}`` and then answers by quoting the tool's result.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from agents import (
    Agent,
    CodeInterpreterTool,
    HostedMCPTool,
    MCPToolApprovalFunctionResult,
    MCPToolApprovalRequest,
    ModelSettings,
    RunConfig,
    Runner,
    WebSearchTool,
    function_tool,
)
from agents.mcp import MCPServerStreamableHttp
from agents.memory import OpenAIConversationsSession
from agents.model_settings import MCPToolChoice
from agents.models.openai_responses import OpenAIResponsesModel, OpenAIResponsesWSModel
from openai import AsyncOpenAI
from pydantic import BaseModel
from support import MODEL
from support.client_stack import CALCULATOR_LABEL, Service, call_directive

RUN = RunConfig(tracing_disabled=True)
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture(params=["http", "websocket"])
async def model(request: pytest.FixtureRequest, async_client: AsyncOpenAI) -> AsyncIterator[OpenAIResponsesModel]:
    """The SDK's Responses model over HTTP, and over the Responses WebSocket (its websocket transport)."""
    if request.param == "http":
        yield OpenAIResponsesModel(model=MODEL, openai_client=async_client)
    else:
        model = OpenAIResponsesWSModel(model=MODEL, openai_client=async_client)
        yield model
        await model.close()


@function_tool
def spell_backwards(word: str) -> str:
    """Spell a word backwards."""
    return word[::-1]


async def test_run_calls_function_tool_and_answers_with_result(model: OpenAIResponsesModel) -> None:
    agent = Agent(name="speller", model=model, tools=[spell_backwards])
    result = await Runner.run(agent, call_directive("functions.spell_backwards", word="harmony"), run_config=RUN)
    assert result.final_output == "The tool functions.spell_backwards returned: ynomrah"


async def test_run_survives_call_to_function_the_agent_does_not_have(model: OpenAIResponsesModel) -> None:
    # Given a function_call item for a tool it lacks, the SDK fails the run (ModelBehaviorError).
    agent = Agent(name="speller", model=model, tools=[spell_backwards])
    result = await Runner.run(agent, call_directive("functions.spell_forwards", word="harmony"), run_config=RUN)
    assert "There is no tool 'functions.spell_forwards'" in result.final_output
    assert not any(item.type == "tool_call_item" for item in result.new_items)


async def test_run_with_tool_choice_none_calls_no_tool(model: OpenAIResponsesModel) -> None:
    agent = Agent(name="speller", model=model, tools=[spell_backwards],
                  model_settings=ModelSettings(tool_choice="none"))
    result = await Runner.run(agent, call_directive("functions.spell_backwards", word="harmony"), run_config=RUN)
    assert "There is no tool 'functions.spell_backwards'" in result.final_output
    assert not any(item.type == "tool_call_item" for item in result.new_items)


@pytest.mark.parametrize("choice", ["required", "spell_backwards"])
async def test_run_with_forced_tool_choice_calls_tool_then_answers(model: OpenAIResponsesModel, choice: str) -> None:
    # The SDK resets tool_choice after the call (reset_tool_choice), so the second turn may answer.
    agent = Agent(name="speller", model=model, tools=[spell_backwards],
                  model_settings=ModelSettings(tool_choice=choice))
    result = await Runner.run(agent, call_directive("functions.spell_backwards", word="harmony"), run_config=RUN)
    assert result.final_output == "The tool functions.spell_backwards returned: ynomrah"
    assert [item.type for item in result.new_items][:2] == ["tool_call_item", "tool_call_output_item"]


class Spelled(BaseModel):
    spelling: str


async def test_run_with_output_type_returns_instance_of_it(model: OpenAIResponsesModel) -> None:
    agent = Agent(name="speller", model=model, output_type=Spelled)
    result = await Runner.run(agent, "harmony", run_config=RUN)
    assert result.final_output == Spelled(spelling="harmony")


async def test_run_with_output_type_answers_tool_result_as_instance_of_it(model: OpenAIResponsesModel) -> None:
    # The SDK parses the final answer after the tool turn as the output type; plain text fails the run.
    agent = Agent(name="speller", model=model, tools=[spell_backwards], output_type=Spelled)
    result = await Runner.run(agent, call_directive("functions.spell_backwards", word="harmony"), run_config=RUN)
    assert result.final_output == Spelled(spelling="The tool functions.spell_backwards returned: ynomrah")


async def test_run_hands_off_to_agent_that_answers(model: OpenAIResponsesModel) -> None:
    helper = Agent(name="helper", model=model)
    triage = Agent(name="triage", model=model, handoffs=[helper])
    result = await Runner.run(triage, call_directive("functions.transfer_to_helper"), run_config=RUN)
    assert result.last_agent is helper
    assert result.final_output == 'The tool functions.transfer_to_helper returned: {"assistant": "helper"}'


async def test_run_streamed_emits_text_deltas_and_final_output(model: OpenAIResponsesModel) -> None:
    agent = Agent(name="echo", model=model)
    result = Runner.run_streamed(agent, "Stream this sentence back", run_config=RUN)
    deltas = [event.data.delta async for event in result.stream_events()
              if event.type == "raw_response_event" and event.data.type == "response.output_text.delta"]
    assert result.final_output == 'You said: "Stream this sentence back".'
    assert "".join(deltas) == result.final_output


async def test_run_streamed_calls_function_tool_and_answers_with_result(model: OpenAIResponsesModel) -> None:
    agent = Agent(name="speller", model=model, tools=[spell_backwards])
    result = Runner.run_streamed(agent, call_directive("functions.spell_backwards", word="stream"), run_config=RUN)
    items = [event.name async for event in result.stream_events() if event.type == "run_item_stream_event"]
    assert items == ["reasoning_item_created", "tool_called", "tool_output",
                     "reasoning_item_created", "message_output_created"]
    assert result.final_output == "The tool functions.spell_backwards returned: maerts"


async def test_run_continues_conversation_from_previous_response_id(model: OpenAIResponsesModel) -> None:
    agent = Agent(name="echo", model=model)
    first = await Runner.run(agent, "The password is swordfish", run_config=RUN)
    # Only the new message is sent: the service finds the first turn from its stored chain.
    second = await Runner.run(agent, "What was the password?", previous_response_id=first.last_response_id,
                              run_config=RUN)
    assert second.final_output == \
        'You said: "What was the password?". Earlier you said: 1. "The password is swordfish"'


async def test_run_with_conversations_session_remembers_earlier_turn(model: OpenAIResponsesModel) -> None:
    """``OpenAIConversationsSession`` keeps the history in ``/v1/conversations`` and sends it back whole."""
    session = OpenAIConversationsSession(openai_client=model._client)
    agent = Agent(name="echo", model=model)
    await Runner.run(agent, "The password is swordfish", session=session, run_config=RUN)
    second = await Runner.run(agent, "What was the password?", session=session, run_config=RUN)
    assert second.final_output == \
        'You said: "What was the password?". Earlier you said: 1. "The password is swordfish"'
    kept = await session.get_items()
    assert [(item["type"], item.get("role")) for item in kept if item["type"] == "message"] == [
        ("message", "user"), ("message", "assistant"), ("message", "user"), ("message", "assistant")]
    await session.clear_session()


async def test_run_with_conversation_id_remembers_earlier_turn(model: OpenAIResponsesModel) -> None:
    """``conversation_id``: the SDK sends each run's new items only; the service keeps the rest."""
    conversation = await model._client.conversations.create()
    agent = Agent(name="echo", model=model)
    await Runner.run(agent, "The password is swordfish", conversation_id=conversation.id, run_config=RUN)
    second = await Runner.run(agent, "What was the password?", conversation_id=conversation.id, run_config=RUN)
    assert second.final_output == \
        'You said: "What was the password?". Earlier you said: 1. "The password is swordfish"'


async def test_run_with_conversation_id_calls_function_tool_and_answers(model: OpenAIResponsesModel) -> None:
    """Mid-run, the tool's output is all the SDK sends: the call it answers is in the conversation."""
    conversation = await model._client.conversations.create()
    agent = Agent(name="speller", model=model, tools=[spell_backwards])
    result = await Runner.run(agent, call_directive("functions.spell_backwards", word="harmony"),
                              conversation_id=conversation.id, run_config=RUN)
    assert result.final_output == "The tool functions.spell_backwards returned: ynomrah"
    kept = [item.type async for item in model._client.conversations.items.list(conversation.id, order="asc")]
    assert kept == ["message", "reasoning", "function_call", "function_call_output", "reasoning", "message"]


async def test_run_with_conversations_session_after_pop_item_forgets_it(model: OpenAIResponsesModel) -> None:
    session = OpenAIConversationsSession(openai_client=model._client)
    agent = Agent(name="echo", model=model)
    await Runner.run(agent, "The password is swordfish", session=session, run_config=RUN)
    while (popped := await session.pop_item()) is not None and popped.get("role") != "user":
        pass  # the answer and its reasoning, then the message that asked
    second = await Runner.run(agent, "What was the password?", session=session, run_config=RUN)
    assert second.final_output == 'You said: "What was the password?".'


async def test_run_with_hosted_mcp_tool_answers_with_service_side_call(model: OpenAIResponsesModel) -> None:
    calculator = HostedMCPTool(tool_config={"type": "mcp", "server_label": CALCULATOR_LABEL,
                                            "require_approval": "never"})
    agent = Agent(name="hosted", model=model, tools=[calculator])
    prompt = call_directive(f"{CALCULATOR_LABEL}.calculate", expression="6 * 7")
    result = await Runner.run(agent, prompt, run_config=RUN)
    assert result.final_output == f"The tool {CALCULATOR_LABEL}.calculate returned: 42"


async def test_run_with_hosted_mcp_tool_calls_after_approval(model: OpenAIResponsesModel) -> None:
    asked: list[str] = []

    def approve(request: MCPToolApprovalRequest) -> MCPToolApprovalFunctionResult:
        asked.append(request.data.name)
        return {"approve": True}

    # The service ends the first response with an mcp_approval_request; the SDK answers it with an
    # mcp_approval_response in its next request, and the service then makes the call.
    calculator = HostedMCPTool(tool_config={"type": "mcp", "server_label": CALCULATOR_LABEL,
                                            "require_approval": "always"}, on_approval_request=approve)
    agent = Agent(name="approving", model=model, tools=[calculator])
    prompt = call_directive(f"{CALCULATOR_LABEL}.calculate", expression="6 * 7")
    result = await Runner.run(agent, prompt, run_config=RUN)
    assert asked == ["calculate"]
    assert result.final_output == f"The tool {CALCULATOR_LABEL}.calculate returned: 42"


@pytest.mark.parametrize("choice", [MCPToolChoice(server_label=CALCULATOR_LABEL, name="calculate"), "mcp"])
async def test_run_with_mcp_tool_choice_calls_hosted_mcp_tool(model: OpenAIResponsesModel, choice: object) -> None:
    # "hello" asks for no call: the choice makes the model call the server's tool (with no arguments,
    # which the calculator refuses; the model quotes its error).
    calculator = HostedMCPTool(tool_config={"type": "mcp", "server_label": CALCULATOR_LABEL,
                                            "require_approval": "never"})
    agent = Agent(name="forced", model=model, tools=[calculator], model_settings=ModelSettings(tool_choice=choice))
    result = await Runner.run(agent, "hello", run_config=RUN)
    assert result.final_output.startswith(f"The tool {CALCULATOR_LABEL}.calculate returned:")


async def test_run_with_web_search_tool_choice_searches(model: OpenAIResponsesModel) -> None:
    agent = Agent(name="searching", model=model, tools=[WebSearchTool()],
                  model_settings=ModelSettings(tool_choice="web_search"))
    result = await Runner.run(agent, "harmony", run_config=RUN)
    assert result.final_output.startswith("The tool browser.search returned:")


CODE_INTERPRETER = CodeInterpreterTool(tool_config={"type": "code_interpreter", "container": {"type": "auto"}})


async def test_run_with_code_interpreter_runs_code_as_code_interpreter_call(model: OpenAIResponsesModel) -> None:
    agent = Agent(name="coding", model=model, tools=[CODE_INTERPRETER])
    result = await Runner.run(agent, "call python 123*456", run_config=RUN)
    calls = [item.raw_item for item in result.new_items if item.type == "tool_call_item"]
    assert [(call.type, call.code, call.status) for call in calls] == [
        ("code_interpreter_call", "123*456", "completed")]
    assert result.final_output.strip() == "The tool python returned: 56088"


async def test_run_continues_conversation_sent_back_after_code_interpreter(model: OpenAIResponsesModel) -> None:
    # The SDK's own history (to_input_list) sends the code_interpreter_call back whole, with no
    # previous_response_id.
    agent = Agent(name="coding", model=model, tools=[CODE_INTERPRETER])
    first = await Runner.run(agent, "call python 123*456", run_config=RUN)
    second = await Runner.run(agent, [*first.to_input_list(), {"role": "user", "content": "thanks"}], run_config=RUN)
    assert second.final_output == 'You said: "thanks". Earlier you said: 1. "call python 123*456"'


async def test_run_with_mcp_server_calls_its_tool_as_function(model: OpenAIResponsesModel, service: Service) -> None:
    async with MCPServerStreamableHttp(params={"url": service.calculator_url}, name="calculator") as calculator:
        agent = Agent(name="client-side", model=model, mcp_servers=[calculator])
        result = await Runner.run(agent, call_directive("functions.calculate", expression="6 * 7"), run_config=RUN)
    assert result.final_output == "The tool functions.calculate returned: 42"
