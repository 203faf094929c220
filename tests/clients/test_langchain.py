"""LangChain (``langchain-openai``'s ``ChatOpenAI`` with ``use_responses_api=True``) against the service
with the scripted engine.

The scripted engine calls the tool named in ``call RECIPIENT {json}``, answers a tool result by
quoting it, and otherwise quotes the user's messages of the conversation (so a continued chain shows
its earlier turns); structured output gets a deterministic instance of the schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import NotFoundError, OpenAI
from pydantic import BaseModel
from support import MODEL
from support.client_stack import CALCULATOR_LABEL, Service, call_directive

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def chat(service: Service) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=service.base_url, api_key="unused", max_retries=0, timeout=30,
                      use_responses_api=True)


@pytest.fixture
def client(service: Service) -> Iterator[OpenAI]:
    """The openai SDK on the same service, to read back what LangChain sent."""
    with OpenAI(base_url=service.base_url, api_key="unused", max_retries=0) as client:
        yield client


@tool
def spell_backwards(word: str) -> str:
    """Spell a word backwards."""
    return word[::-1]


class City(BaseModel):
    name: str
    population: int


def _items(message: AIMessage, kind: str) -> list[dict[str, Any]]:
    return [block for block in message.content if isinstance(block, dict) and block.get("type") == kind]


def test_invoke_answers_with_text(chat: ChatOpenAI) -> None:
    answer = chat.invoke("Hello there")
    assert isinstance(answer, AIMessage)
    assert answer.text == 'You said: "Hello there".'
    assert answer.id is not None and answer.id.startswith("resp_")
    assert answer.usage_metadata is not None and answer.usage_metadata["output_tokens"] > 0


def test_stream_yields_the_text_invoke_returns(chat: ChatOpenAI) -> None:
    chunks = list(chat.stream("Hello there"))
    assert all(isinstance(chunk, AIMessageChunk) for chunk in chunks)
    assert len(chunks) > 3
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert whole.text == chat.invoke("Hello there").text


@pytest.mark.parametrize("streaming", [False, True], ids=["invoke", "stream"])
def test_bind_tools_loop_calls_tool_then_answers_with_result(chat: ChatOpenAI, streaming: bool) -> None:
    chat = chat.model_copy(update={"streaming": streaming})
    model = chat.bind_tools([spell_backwards])
    messages: list = [HumanMessage(call_directive("functions.spell_backwards", word="harmony"))]
    called = model.invoke(messages)
    assert [(c["name"], c["args"]) for c in called.tool_calls] == [("spell_backwards", {"word": "harmony"})]
    messages += [called, ToolMessage(spell_backwards.invoke(called.tool_calls[0]["args"]),
                                     tool_call_id=called.tool_calls[0]["id"])]
    answer = model.invoke(messages)
    assert answer.tool_calls == []
    assert answer.text == "The tool functions.spell_backwards returned: ynomrah"


def test_with_structured_output_json_schema_returns_model_instance(chat: ChatOpenAI) -> None:
    # The scripted engine writes a deterministic instance of the schema (its free strings quote the user).
    city = chat.with_structured_output(City, method="json_schema").invoke("Paris")
    assert city == City(name="Paris", population=0)


def test_with_structured_output_function_calling_returns_forced_call_arguments(chat: ChatOpenAI) -> None:
    # LangChain forces the call (tool_choice naming the function); the scripted model fills it from the prompt.
    prompt = call_directive("functions.City", name="Paris", population=2_100_000)
    city = chat.with_structured_output(City, method="function_calling").invoke(prompt)
    assert city == City(name="Paris", population=2_100_000)


def test_with_structured_output_function_calling_without_arguments_in_prompt_returns_instance(chat: ChatOpenAI) -> None:
    # The scripted model fills a forced call the prompt gives no arguments for from its signature.
    city = chat.with_structured_output(City, method="function_calling").invoke("Paris")
    assert city == City(name="Paris", population=0)


def test_use_previous_response_id_continues_the_chain(chat: ChatOpenAI, client: OpenAI) -> None:
    # LangChain sends only the messages after the last AI message, and that message's response id.
    chat = chat.model_copy(update={"use_previous_response_id": True})
    first = chat.invoke("My name is Ada.")
    answer = chat.invoke([HumanMessage("My name is Ada."), first, HumanMessage("What is my name?")])
    assert "My name is Ada." in answer.text and "What is my name?" in answer.text
    assert answer.id is not None
    assert client.responses.retrieve(answer.id).previous_response_id == first.id
    assert [item.type for item in client.responses.input_items.list(answer.id).data] == ["message"]


def test_store_false_with_encrypted_reasoning_continues_by_value(chat: ChatOpenAI, client: OpenAI) -> None:
    chat = chat.model_copy(update={"store": False, "include": ["reasoning.encrypted_content"],
                                   "reasoning": {"effort": "low"}})
    first = chat.invoke("My name is Ada.")
    assert [bool(block.get("encrypted_content")) for block in _items(first, "reasoning")] == [True]
    assert first.id is not None
    with pytest.raises(NotFoundError):
        client.responses.retrieve(first.id)  # nothing stored: the next turn must send it all
    answer = chat.invoke([HumanMessage("My name is Ada."), first, HumanMessage("What is my name?")])
    assert "My name is Ada." in answer.text and "What is my name?" in answer.text


HOSTED_TOOLS = {
    # tool, prompt, the call item's type, what the answer starts with
    "web_search": ({"type": "web_search"}, call_directive("browser.search", query="harmony"), "web_search_call",
                   "The tool browser.search returned: [{"),
    "code_interpreter": ({"type": "code_interpreter", "container": {"type": "auto"}}, "call python 123*456",
                         "code_interpreter_call", "The tool python returned: 56088"),
    "mcp": ({"type": "mcp", "server_label": CALCULATOR_LABEL, "require_approval": "never"},
            call_directive(f"{CALCULATOR_LABEL}.calculate", expression="1+2"), "mcp_call",
            f"The tool {CALCULATOR_LABEL}.calculate returned: 3"),
}


@pytest.mark.parametrize("streaming", [False, True], ids=["invoke", "stream"])
@pytest.mark.parametrize("hosted", HOSTED_TOOLS)
def test_bind_tools_hosted_tool_runs_in_the_service_and_the_turn_continues(
    chat: ChatOpenAI, hosted: str, streaming: bool
) -> None:
    tool_spec, prompt, item_type, answer_start = HOSTED_TOOLS[hosted]
    model = chat.model_copy(update={"streaming": streaming}).bind_tools([tool_spec])
    first = model.invoke(prompt)
    assert [item["status"] for item in _items(first, item_type)] == ["completed"]
    assert first.text.strip().startswith(answer_start)
    # The next turn sends the first back whole (its hosted call item included), by value.
    answer = model.invoke([HumanMessage(prompt), first, HumanMessage("thanks")])
    assert answer.text == f'You said: "thanks". Earlier you said: 1. {json.dumps(prompt)}'


def test_stream_v0_output_with_hosted_tool_turn_is_sent_back_whole(chat: ChatOpenAI) -> None:
    # output_version="v0" joins a streamed turn's chunks field by field: two reasoning items that both
    # carried "status": "in_progress" became "in_progressin_progress", which the next turn sent back.
    tool_spec, prompt, _, answer_start = HOSTED_TOOLS["mcp"]
    model = chat.model_copy(update={"output_version": "v0"}).bind_tools([tool_spec])
    first: AIMessageChunk | None = None
    for chunk in model.stream(prompt):
        first = chunk if first is None else first + chunk
    assert first is not None and first.text.strip().startswith(answer_start)
    answer = model.invoke([HumanMessage(prompt), first, HumanMessage("thanks")])
    assert answer.text.startswith('You said: "thanks".')
