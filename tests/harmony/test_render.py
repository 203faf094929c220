"""render_prompt: request + stored turns → gpt-oss prompt tokens."""

from __future__ import annotations

import gc
import weakref

import pytest
from openai.types.responses import EasyInputMessage
from support.harmony_transcripts import SCENARIOS, run_scenario

from oss_responses.errors import BadRequest
from oss_responses.harmony.input_items import InputConverter
from oss_responses.harmony.render import (
    ConversationTurn,
    McpToolSpec,
    RenderOptions,
    forced_call_header,
    forced_call_names,
    hosted_builtins,
    hosted_calls,
    offered_functions,
    plan_conversation,
    render_prompt,
    strict_functions,
)
from oss_responses.requests import parse_create_request

OPTIONS = RenderOptions(
    conversation_start_date="2026-11-23",
    knowledge_cutoff="2024-06",
    default_reasoning_effort="medium",
    builtin_tool_labels={"code_interpreter": "python", "web_search_preview": "browser"},
    mcp_tools={"calc": [McpToolSpec("add", "Add two numbers", {"type": "object"}),
                        McpToolSpec("mul", "Multiply", None)]},
)


def _request(**body):
    return parse_create_request({"model": "gpt-oss-20b", **body})


def _text(encoding, request, history=()) -> str:
    return encoding.decode(render_prompt(request, list(history), OPTIONS, encoding).token_ids)


def test_render_prompt_ends_with_assistant_start(encoding) -> None:
    assert _text(encoding, _request(input="hi")).endswith("<|start|>user<|message|>hi<|end|><|start|>assistant")


def test_render_system_message_has_effort_date_and_cutoff(encoding) -> None:
    text = _text(encoding, _request(input="hi", reasoning={"effort": "high"}))
    assert "Reasoning: high" in text and "Current date: 2026-11-23" in text and "Knowledge cutoff: 2024-06" in text


def test_render_request_without_tools_has_no_developer_message(encoding) -> None:
    assert "<|start|>developer" not in _text(encoding, _request(input="hi"))


def test_render_builtin_label_becomes_python_tool(encoding) -> None:
    request = _request(input="Multiply 123*456 using the mcp code_interpreter tool",
                       tools=[{"type": "mcp", "server_label": "code_interpreter", "server_url": "http://x"}])
    rendered = render_prompt(request, [], OPTIONS, encoding)
    system = encoding.decode(rendered.token_ids).split("<|end|>")[0]
    assert "## python" in system and rendered.mcp_labels == {"python": "code_interpreter"}


def test_render_mcp_server_filtered_by_allowed_tools(encoding) -> None:
    request = _request(input="hi", tools=[{"type": "mcp", "server_label": "calc", "server_url": "http://y",
                                           "allowed_tools": ["add"]}])
    rendered = render_prompt(request, [], OPTIONS, encoding)
    text = encoding.decode(rendered.token_ids)
    assert "namespace calc {" in text and "type add" in text and "type mul" not in text
    assert rendered.mcp_labels == {"calc": "calc"}


def test_render_function_tools_and_instructions_in_developer_message(encoding) -> None:
    request = _request(input="hi", instructions="Be brief.",
                       tools=[{"type": "function", "name": "get_weather",
                               "parameters": {"type": "object", "properties": {}}}])
    developer = _text(encoding, request).split("<|start|>developer<|message|>")[1]
    assert developer.startswith("# Instructions\n\nBe brief.") and "namespace functions {" in developer


def test_render_tool_choice_none_renders_no_tools(encoding) -> None:
    request = _request(input="hi", tool_choice="none", tools=[{"type": "function", "name": "f", "parameters": {}}])
    assert "namespace functions" not in _text(encoding, request)


def test_offered_functions_are_the_function_and_namespace_tools_shown() -> None:
    request = _request(input="hi", tools=[{"type": "function", "name": "get_weather", "parameters": {}},
                                          NAMESPACE_TOOL, {"type": "web_search_preview"}])
    assert offered_functions(request) == frozenset({"functions.get_weather", "multi_agent_v1.spawn_agent"})


def test_offered_functions_are_none_under_tool_choice_none() -> None:
    request = _request(input="hi", tool_choice="none", tools=[{"type": "function", "name": "f", "parameters": {}}])
    assert offered_functions(request) == frozenset()


ALLOW_G = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "g"},
                                                               {"type": "mcp", "server_label": "calc"}]}
CALC = {"type": "mcp", "server_label": "calc", "server_url": "http://y"}
F_G_CALC = [{"type": "function", "name": "f", "parameters": {}}, {"type": "function", "name": "g", "parameters": {}},
            CALC,
            {"type": "mcp", "server_label": "code_interpreter", "server_url": "http://x"}]


def test_render_allowed_tools_renders_only_tools_it_lists(encoding) -> None:
    rendered = render_prompt(_request(input="hi", tool_choice=ALLOW_G, tools=F_G_CALC), [], OPTIONS, encoding)
    text = encoding.decode(rendered.token_ids)
    assert "type g = " in text and "type f = " not in text
    assert "namespace calc {" in text and "## python" not in text
    assert rendered.mcp_labels == {"calc": "calc"}


def test_offered_functions_are_only_those_allowed_tools_lists() -> None:
    assert offered_functions(_request(input="hi", tool_choice=ALLOW_G, tools=F_G_CALC)) == frozenset({"functions.g"})


@pytest.mark.parametrize(("choice", "header"), [
    ({"type": "function", "name": "f"}, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>"),
    ("required", "<|channel|>commentary to=functions."),
    ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]},
     "<|channel|>commentary to=functions."),
    ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "f"}]}, None),
    ("auto", None),
])
def test_forced_call_header_starts_call_tool_choice_asks_for(choice: object, header: str | None) -> None:
    request = _request(tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}], tool_choice=choice)
    assert forced_call_header(request, {}) == header


SERVERS = [{"type": "mcp", "server_label": "calc"}, {"type": "mcp", "server_label": "code_interpreter"},
           {"type": "web_search"}]


@pytest.mark.parametrize(("choice", "header"), [
    ({"type": "mcp", "server_label": "calc"}, "<|channel|>commentary to=calc."),
    ({"type": "mcp", "server_label": "calc", "name": "add"},
     "<|channel|>commentary to=calc.add <|constrain|>json<|message|>"),
    ({"type": "mcp", "server_label": "code_interpreter", "name": "run"}, "<|channel|>analysis to=python"),
    ({"type": "web_search"}, "<|channel|>analysis to=browser."),
    ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "mcp", "server_label": "calc"}]},
     "<|channel|>commentary to=calc."),
    ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "web_search"}]},
     "<|channel|>analysis to=browser."),
])
def test_forced_call_header_starts_call_of_server_or_builtin(choice: object, header: str) -> None:
    request = _request(tools=SERVERS, tool_choice=choice)
    assert forced_call_header(request, OPTIONS.builtin_tool_labels) == header


@pytest.mark.parametrize(("tools", "hosted"), [
    ([{"type": "web_search"}], {"browser"}),
    ([{"type": "web_search_preview"}, {"type": "code_interpreter", "container": {"type": "auto"}}],
     {"browser", "python"}),
    ([{"type": "mcp", "server_label": "web_search_preview"}, {"type": "mcp", "server_label": "calc"}], set()),
    ([{"type": "mcp", "server_label": "web_search_preview"}, {"type": "web_search"}], {"browser"}),
])
def test_hosted_builtins_are_those_a_hosted_tool_type_serves(tools: list, hosted: set) -> None:
    # The last tool of a built-in wins, as in the prompt's tool list.
    labels = {"web_search_preview": "browser", "code_interpreter": "python"}
    assert hosted_builtins(_request(tools=tools), labels) == hosted


@pytest.mark.parametrize(("tool", "include", "shown"), [
    ({"type": "code_interpreter", "container": {"type": "auto"}}, None, (None, False, False)),
    ({"type": "code_interpreter", "container": "cntr_abc"}, ["code_interpreter_call.outputs"],
     ("cntr_abc", True, False)),
    ({"type": "web_search"}, ["web_search_call.action.sources"], (None, False, True)),
])
def test_hosted_calls_show_container_outputs_and_sources_the_request_asks_for(tool: dict, include: list | None,
                                                                              shown: tuple) -> None:
    calls = hosted_calls(_request(tools=[tool], include=include))
    assert (calls.container_id, calls.code_outputs, calls.search_sources) == shown


def test_forced_call_header_of_required_with_one_server_starts_its_call() -> None:
    request = _request(tools=SERVERS[:1], tool_choice="required")
    assert forced_call_header(request, OPTIONS.builtin_tool_labels) == "<|channel|>commentary to=calc."


def test_render_json_schema_format_in_developer_message(encoding) -> None:
    request = _request(input="hi",
                       text={"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}})
    assert '# Response Formats\n\n## answer\n\n{"type":"object"}' in _text(encoding, request)


def test_render_web_search_tool_as_browser(encoding) -> None:
    # Which server backs it is the tool policy's question (checked when the request is accepted).
    request = _request(input="hi", tools=[{"type": "web_search", "external_web_access": False}])
    rendered = render_prompt(request, [], OPTIONS, encoding)
    assert "## browser" in encoding.decode(rendered.token_ids)
    assert rendered.mcp_labels == {"browser": "web_search"}


NAMESPACE_TOOL = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents",
    "tools": [{"type": "function", "name": "spawn_agent", "description": "Spawn one",
               "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}],
}


def test_strict_functions_are_the_shown_functions_not_marked_strict_false() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    tools = [{"type": "function", "name": "strict", "parameters": schema, "strict": True},
             {"type": "function", "name": "unset", "parameters": schema},
             {"type": "function", "name": "free", "parameters": schema, "strict": False},
             {"type": "function", "name": "no_parameters"}, NAMESPACE_TOOL]

    assert strict_functions(_request(input="hi", tools=tools)) == {
        "functions.strict": schema, "functions.unset": schema,
        "multi_agent_v1.spawn_agent": NAMESPACE_TOOL["tools"][0]["parameters"],  # type: ignore[index]
    }


def test_strict_functions_are_only_those_tool_choice_shows() -> None:
    assert strict_functions(_request(input="hi", tool_choice=ALLOW_G, tools=F_G_CALC)) == {"functions.g": {}}
    assert strict_functions(_request(input="hi", tool_choice="none", tools=F_G_CALC)) == {}


@pytest.mark.parametrize(("choice", "tools", "names"), [
    ("required", F_G_CALC, ["f", "g"]),
    ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "g"}]}, F_G_CALC, ["g"]),
    ({"type": "function", "name": "f"}, F_G_CALC, []),  # the worker writes the whole header
    ("required", [NAMESPACE_TOOL], ["spawn_agent"]),
    ("required", [CALC], ["add", "mul"]),  # the server's tools as listed for this response
    ({"type": "mcp", "server_label": "calc"}, F_G_CALC, ["add", "mul"]),
    ({"type": "mcp", "server_label": "calc"}, [CALC | {"allowed_tools": ["mul"]}], ["mul"]),  # those shown
    ({"type": "mcp", "server_label": "calc", "name": "add"}, F_G_CALC, []),
    ({"type": "mcp", "server_label": "docs"}, [{"type": "mcp", "server_label": "docs", "server_url": "http://d"}],
     []),  # no list (its server did not answer): the model names the tool unconstrained
    ({"type": "code_interpreter"}, [{"type": "code_interpreter", "container": "c"}], []),  # to=python: no name
    ("auto", F_G_CALC, []),
])
def test_forced_call_names_are_the_tools_the_model_may_finish_the_forced_header_with(
    choice: object, tools: list, names: list
) -> None:
    request = _request(input="hi", tool_choice=choice, tools=tools)
    assert forced_call_names(request, OPTIONS.builtin_tool_labels, OPTIONS.mcp_tools) == names


def test_render_namespace_tool_as_its_own_namespace(encoding) -> None:
    rendered = render_prompt(_request(input="hi", tools=[NAMESPACE_TOOL]), [], OPTIONS, encoding)
    text = encoding.decode(rendered.token_ids)
    assert ("## multi_agent_v1\n\n// Sub-agents\nnamespace multi_agent_v1 {\n\n"
            "// Spawn one\ntype spawn_agent = (_: {\ntask?: string,\n}) => any;") in text
    assert rendered.function_namespaces == frozenset({"multi_agent_v1"})


@pytest.mark.parametrize("name", ["functions", "browser", "python", "container"])
def test_render_namespace_tool_with_reserved_name_is_bad_request(encoding, name: str) -> None:
    request = _request(input="hi", tools=[NAMESPACE_TOOL | {"name": name}])
    with pytest.raises(BadRequest) as error:
        render_prompt(request, [], OPTIONS, encoding)
    assert error.value.param == "tools[0].name"


def test_render_namespace_tool_with_custom_tool_is_bad_request(encoding) -> None:
    tool = NAMESPACE_TOOL | {"tools": [{"type": "custom", "name": "apply_patch"}]}
    with pytest.raises(BadRequest) as error:
        render_prompt(_request(input="hi", tools=[tool]), [], OPTIONS, encoding)
    assert error.value.param == "tools[0].tools[0].type"


@pytest.mark.parametrize(
    ("effort", "rendered"),
    [("none", "low"), ("minimal", "low"), ("low", "low"), ("medium", "medium"), ("high", "high"), ("xhigh", "high")],
)
def test_render_reasoning_effort_as_nearest_gpt_oss_level(encoding, effort: str, rendered: str) -> None:
    request = _request(input="hi", reasoning={"effort": effort})
    assert f"Reasoning: {rendered}" in _text(encoding, request)


def test_render_drops_analysis_of_turns_closed_by_final_answer(encoding) -> None:
    run = run_scenario(encoding, SCENARIOS["reasoning_final"])
    turn = ConversationTurn([{"role": "user", "name": None, "content": [{"type": "text", "text": "hello"}]}], {})
    turn.messages += run.translator.output_messages
    text = _text(encoding, _request(input="again"), [turn])
    assert "Simple greeting" not in text and "How can I help you today?" in text


def test_render_keeps_analysis_of_open_tool_chain(encoding) -> None:
    run = run_scenario(encoding, SCENARIOS["function_call"])
    turn = ConversationTurn(list(run.translator.output_messages), dict(run.translator.function_calls))
    (call_id,) = turn.function_calls
    request = _request(input=[{"type": "function_call_output", "call_id": call_id, "output": '{"temp": 21}'}])
    rendered = render_prompt(request, [turn], OPTIONS, encoding)
    text = encoding.decode(rendered.token_ids)
    assert "Need the weather" in text
    assert text.endswith('<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>'
                         '{"temp": 21}<|end|><|start|>assistant')
    assert rendered.new_messages[0]["name"] == "functions.get_weather"


def test_render_replays_stored_messages_verbatim(encoding) -> None:
    run = run_scenario(encoding, SCENARIOS["mcp_code_interpreter"])
    turn = ConversationTurn(list(run.translator.output_messages))
    text = _text(encoding, _request(input="thanks"), [ConversationTurn.from_dict(turn.to_dict())])
    assert "<|start|>python to=assistant<|channel|>analysis" not in text  # closed chain: its analysis dropped
    assert "123 × 456 = **56088**.<|end|><|start|>user<|message|>thanks" in text


def test_render_unknown_function_call_id_is_bad_request(encoding) -> None:
    request = _request(input=[{"type": "function_call_output", "call_id": "call_nope", "output": "x"}])
    with pytest.raises(BadRequest) as raised:
        render_prompt(request, [], OPTIONS, encoding)
    assert raised.value.param == "input"  # OpenAI names the whole input for an unknown call_id


def test_render_input_items_become_harmony_messages(encoding) -> None:
    request = _request(input=[
        {"role": "user", "content": "q"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
    ])
    rendered = render_prompt(request, [], OPTIONS, encoding)
    assert [(m["role"], m.get("channel"), m.get("recipient")) for m in rendered.new_messages] == [
        ("user", None, None), ("assistant", "analysis", None), ("assistant", "commentary", "functions.f"),
        ("tool", "commentary", "assistant"),
    ]
    assert rendered.function_calls == {"call_1": "f"}


def test_render_function_output_image_and_file_reach_model_as_notes(encoding) -> None:
    request = _request(input=[
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "call_1", "name": "view_image", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": [
            {"type": "input_text", "text": "Here: "},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            {"type": "input_file", "filename": "a.txt", "file_data": "data:text/plain;base64,aGk="},
        ]},
    ])
    result = render_prompt(request, [], OPTIONS, encoding).new_messages[-1]
    assert result["content"][0]["text"] == (
        'Here: [image not shown: gpt-oss reads text only][file "a.txt" not shown: gpt-oss reads text only]'
    )


def test_render_mcp_call_input_item_replays_call_and_result(encoding) -> None:
    request = _request(
        tools=[{"type": "mcp", "server_label": "calc", "server_url": "http://y"}],
        input=[
            {"role": "user", "content": "Add 1 and 2"},
            {"type": "mcp_call", "id": "mcp_1", "server_label": "calc", "name": "add", "arguments": '{"a":1,"b":2}',
             "output": "3"},
        ],
    )
    text = _text(encoding, request)
    assert text.endswith(
        '<|start|>assistant to=calc.add<|channel|>commentary <|constrain|>json<|message|>{"a":1,"b":2}<|call|>'
        "<|start|>calc.add to=assistant<|channel|>commentary<|message|>3<|end|><|start|>assistant"
    )


def test_render_web_search_call_input_item_replays_browser_call_without_result(encoding) -> None:
    # A client keeping its own history (Codex with store off) sends back the web_search_call items it got.
    request = _request(
        tools=[{"type": "web_search"}],
        input=[
            {"role": "user", "content": "Find harmony"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed",
             "action": {"type": "search", "query": "harmony"}},
        ],
    )
    assert _text(encoding, request).endswith(
        '<|start|>assistant to=browser.search<|channel|>analysis<|message|>{"query": "harmony"}<|call|>'
        "<|start|>browser.search to=assistant<|channel|>analysis<|message|>"
        "(The result of this call is not in the conversation.)<|end|><|start|>assistant"
    )


@pytest.mark.parametrize(("outputs", "result"), [
    ([{"type": "logs", "logs": "56088\n"}], "56088\n"),
    (None, "(The result of this call is not in the conversation.)"),
    ([], "(The result of this call is not in the conversation.)"),
])
def test_render_code_interpreter_call_input_item_replays_python_call_and_outputs(
        encoding, outputs: list | None, result: str) -> None:
    # The Agents SDK sends its history back whole: the call's outputs are there when include asked for them.
    request = _request(
        tools=[{"type": "code_interpreter", "container": {"type": "auto"}}],
        input=[
            {"role": "user", "content": "Multiply"},
            {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "code": "123*456",
             "container_id": "cntr_1", "outputs": outputs},
        ],
    )
    assert _text(encoding, request).endswith(
        "<|start|>assistant to=python<|channel|>analysis<|message|>123*456<|call|>"
        f"<|start|>python to=assistant<|channel|>analysis<|message|>{result}<|end|><|start|>assistant"
    )


@pytest.mark.parametrize(
    ("error", "result"),
    [
        ({"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "division by zero"}]},
         "division by zero"),
        ({"type": "mcp_protocol_error", "code": -32602, "message": "unknown tool"}, "unknown tool"),
        ({"type": "http_error", "code": 502, "message": "bad gateway"}, "bad gateway"),
    ],
)
def test_render_mcp_call_error_reaches_model_as_text(encoding, error: dict, result: str) -> None:
    request = _request(
        tools=[{"type": "mcp", "server_label": "calc", "server_url": "http://y"}],
        input=[
            {"role": "user", "content": "Divide 1 by 0"},
            {"type": "mcp_call", "id": "mcp_1", "server_label": "calc", "name": "div", "arguments": '{"a":1,"b":0}',
             "error": error},
        ],
    )
    text = _text(encoding, request)
    assert text.endswith(
        f"<|start|>calc.div to=assistant<|channel|>commentary<|message|>{result}<|end|><|start|>assistant"
    )


@pytest.mark.parametrize(("label", "name"), [("code_interpreter", "calculate"), ("web_search_preview", "fetch")])
def test_render_forcing_a_tool_a_builtin_label_lacks_is_bad_request(encoding, label: str, name: str) -> None:
    request = _request(tools=[{"type": "mcp", "server_label": label, "server_url": "http://x"}],
                       tool_choice={"type": "mcp", "server_label": label, "name": name})
    with pytest.raises(BadRequest) as raised:
        render_prompt(request, [], OPTIONS, encoding)
    assert raised.value.param == "tool_choice.name" and f"'{name}'" not in raised.value.message


@pytest.mark.parametrize(("label", "name"), [("code_interpreter", "python"), ("web_search_preview", "open")])
def test_render_forcing_a_tool_of_a_builtin_label_it_has_is_accepted(encoding, label: str, name: str) -> None:
    request = _request(tools=[{"type": "mcp", "server_label": label, "server_url": "http://x"}],
                       tool_choice={"type": "mcp", "server_label": label, "name": name})
    assert render_prompt(request, [], OPTIONS, encoding).token_ids


JSON_OBJECT = {"format": {"type": "json_object"}}


def test_render_json_object_without_json_in_input_messages_is_refused(encoding) -> None:
    # OpenAI's rule and words: instructions do not count, nor does an assistant's earlier answer.
    request = _request(input=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "{}"}],
                       instructions="Answer in JSON.", text=JSON_OBJECT)
    with pytest.raises(BadRequest, match="must contain the word 'json'") as refused:
        render_prompt(request, [], OPTIONS, encoding)
    assert refused.value.param == "input"


@pytest.mark.parametrize("message", [
    {"role": "user", "content": "Reply as Json."},
    {"role": "system", "content": "You write JSON."},
    {"role": "developer", "content": [{"type": "input_text", "text": "json please"}]},
])
def test_render_json_object_with_json_in_an_input_message_is_accepted(encoding, message) -> None:
    request = _request(input=[message, {"role": "user", "content": "hi"}], text=JSON_OBJECT)
    assert "Respond with a single JSON object." in _text(encoding, request)


def test_render_json_object_with_json_in_an_earlier_turn_is_accepted(encoding) -> None:
    earlier = ConversationTurn([{"role": "user", "content": [{"type": "text", "text": "Use json from now on."}]}])
    assert _text(encoding, _request(input="hi", text=JSON_OBJECT), [earlier])


CALL = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}
CALL_OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "42"}
F_TOOL = [{"type": "function", "name": "f", "parameters": {}}]


def _turn_with_call(*extra_items: dict) -> ConversationTurn:
    return ConversationTurn([], {"call_1": "functions.f"}, [{"type": "message", "role": "user", "content": "hi"},
                                                            CALL, *extra_items])


def test_render_previous_call_without_output_is_refused(encoding) -> None:
    # OpenAI's words: a conversation goes on only once each function call has its output.
    with pytest.raises(BadRequest, match=r"^No tool output found for function call call_1\.$") as refused:
        render_prompt(_request(input="never mind", tools=F_TOOL), [_turn_with_call()], OPTIONS, encoding)
    assert refused.value.param == "input"


def test_render_input_call_without_output_is_refused(encoding) -> None:
    with pytest.raises(BadRequest, match="call_1"):
        render_prompt(_request(input=[{"role": "user", "content": "hi"}, CALL], tools=F_TOOL), [], OPTIONS, encoding)


def test_render_call_answered_in_input_or_earlier_turn_is_accepted(encoding) -> None:
    assert _text(encoding, _request(input=[CALL_OUTPUT], tools=F_TOOL), [_turn_with_call()])
    assert _text(encoding, _request(input="and now?", tools=F_TOOL), [_turn_with_call(CALL_OUTPUT)])


def test_render_call_cut_short_needs_no_output(encoding) -> None:
    cut = ConversationTurn([], {}, [CALL | {"status": "incomplete"}])
    assert _text(encoding, _request(input="go on", tools=F_TOOL), [cut])


def _turn_saying(text: str) -> ConversationTurn:
    return ConversationTurn([{"role": "user", "content": [{"type": "text", "text": text}]}], {}, [])


def test_plan_refuses_input_with_run_too_long_to_tokenize() -> None:
    with pytest.raises(BadRequest, match="70,000 bytes without a break") as refused:
        plan_conversation(_request(input="x" * 70_000), [], OPTIONS)
    assert refused.value.param == "input"


def test_plan_does_not_count_runs_of_earlier_turns_against_the_limit() -> None:
    """Earlier turns were checked when they came: a chain of them only costs tokenizing time (a chat that
    pasted a 40 kB sequence each turn was refused at its eleventh); the tokenizer weighs that time."""
    history = [_turn_saying("acgt" * 15_000) for _ in range(5)]
    plan = plan_conversation(_request(input="and this one?"), history, OPTIONS)
    assert len(plan.messages) == 1 + 5 + 1  # system, the five turns, this input


def test_input_converter_is_freed_by_reference_counting() -> None:
    # Its dict of bound methods made every converter a reference cycle: each request's planning (the API) and
    # each run's prompt (the worker) left one, with what it held, for the cyclic garbage collector.
    items = [EasyInputMessage(role="user", content="hello", type="message")]
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        converter = InputConverter({}, {}, frozenset())
        converter.convert(items)
        freed = weakref.ref(converter)
        del converter
        assert freed() is None
    finally:
        if was_enabled:
            gc.enable()
