"""Request shapes taken from OpenAI's API reference and from real clients (Codex CLI, the Agents SDK,
framework integrations replaying history): every one is accepted; what gpt-oss cannot use is a 400
that names the field, with nothing stored (no row, no event stream, no task).
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
import redis as redis_lib
from sqlalchemy import func, select
from support import MODEL
from support.api_server import ApiServer

from oss_responses.config import Settings
from oss_responses.sealing import new_key
from oss_responses.storage import ResponseRow

USER = {"role": "user", "content": "hi"}
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
NAMESPACE = {
    "type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
    "tools": [{"type": "function", "name": "spawn_agent", "description": "Spawn", "strict": False,
               "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}],
}
SCHEMA = {"type": "json_schema", "name": "answer", "strict": True,
          "schema": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
                     "additionalProperties": False}}

ACCEPTED: dict[str, dict[str, Any]] = {
    "string input": {"input": "hi"},
    "developer message with parts": {
        "input": [{"role": "developer", "content": [{"type": "input_text", "text": "be brief"}]}, USER]},
    "system message": {"input": [{"role": "system", "content": "be brief"}, USER]},
    "typed user message with status": {"input": [{"type": "message", "role": "user", "status": "completed",
                                                  "content": [{"type": "input_text", "text": "hi"}]}]},
    "assistant output_text without id or status": {"input": [
        USER, {"role": "assistant", "content": [{"type": "output_text", "text": "hello"}]}, USER]},
    "assistant output_text with annotations, no id": {"input": [
        USER, {"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": "hello", "annotations": []}]}, USER]},
    "assistant output message as returned": {"input": [
        USER, {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "hello", "annotations": []}]}, USER]},
    "assistant string content": {"input": [USER, {"role": "assistant", "content": "hello"}, USER]},
    "reasoning without id": {"input": [
        USER, {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
        {"role": "assistant", "content": "hello"}, USER]},
    "reasoning with summary only": {"input": [
        USER, {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thought"}]}, USER]},
    "function call and output without ids": {"tools": [WEATHER], "input": [
        USER, CALL, {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]},
    "function call output as parts": {"tools": [WEATHER], "input": [
        USER, CALL | {"id": "fc_1", "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "sunny"}]}]},
    "function call output with an image (Codex's view_image)": {"tools": [WEATHER], "input": [
        USER, CALL, {"type": "function_call_output", "call_id": "call_1",
                     "output": [{"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}]},
    "function call output with a file": {"tools": [WEATHER], "input": [
        USER, CALL, {"type": "function_call_output", "call_id": "call_1",
                     "output": [{"type": "input_file", "filename": "a.txt",
                                 "file_data": "data:text/plain;base64,aGk="}]}]},
    "namespaced function call replayed": {"tools": [NAMESPACE], "input": [
        USER, {"type": "function_call", "call_id": "call_2", "namespace": "multi_agent_v1", "name": "spawn_agent",
               "arguments": '{"task": "x"}'},
        {"type": "function_call_output", "call_id": "call_2", "output": "spawned"}]},
    "namespace tool": {"tools": [NAMESPACE]},
    "web_search tool": {"tools": [{"type": "web_search", "external_web_access": False}]},
    "web_search_preview tool": {"tools": [{"type": "web_search_preview"}]},
    "web_search tools of dated types": {"tools": [{"type": "web_search_2025_08_26"},
                                                  {"type": "web_search_preview_2025_03_11"}]},
    "reasoning effort none": {"reasoning": {"effort": "none"}},
    "reasoning effort minimal": {"reasoning": {"effort": "minimal"}},
    "reasoning effort xhigh": {"reasoning": {"effort": "xhigh"}},
    "reasoning summary auto": {"reasoning": {"summary": "auto"}},
    "reasoning summary detailed with effort": {"reasoning": {"effort": "high", "summary": "detailed"}},
    "text verbosity": {"text": {"verbosity": "low"}},
    "json_schema strict": {"text": {"format": SCHEMA}},
    "json_object": {"input": "Answer in JSON.", "text": {"format": {"type": "json_object"}}},
    "client_metadata": {"client_metadata": {"installation_id": "i", "session_id": "s"}},
    "prompt cache fields": {"prompt_cache_key": "k", "prompt_cache_retention": "24h"},
    "identity fields": {"user": "u", "safety_identifier": "s"},
    "service_tier": {"service_tier": "auto"},
    "stream_options": {"stream_options": {"include_obfuscation": False}},
    "include values": {"include": ["message.output_text.logprobs", "web_search_call.action.sources"]},
    "sampling and limits": {"temperature": 0.2, "top_p": 0.9, "max_output_tokens": 100, "max_tool_calls": 3,
                            "top_logprobs": 0, "truncation": "auto", "seed": 7},
    "parallel_tool_calls and tool_choice": {"tools": [WEATHER], "parallel_tool_calls": True, "tool_choice": "auto"},
    "tool_choice required": {"tools": [WEATHER], "tool_choice": "required"},
    "tool_choice naming a function": {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}},
    "tool_choice forcing web search": {"tools": [{"type": "web_search", "external_web_access": False}],
                                       "tool_choice": {"type": "web_search"}},
    "codex first request": {
        "instructions": None, "input": [{"type": "message", "id": "msg_u", "role": "developer",
                                         "content": [{"type": "input_text", "text": "sandbox"}]},
                                        {"type": "message", "role": "user",
                                         "content": [{"type": "input_text", "text": "hi"}]}],
        "tools": [WEATHER | {"strict": False}, NAMESPACE, {"type": "web_search", "external_web_access": False}],
        "tool_choice": "auto", "parallel_tool_calls": True, "reasoning": {"summary": "auto"},
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "019-session",
        "client_metadata": {"installation_id": "i", "session_id": "s", "turn_id": "t"}, "stream": False,
    },
}

REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "image input": ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
                    "input[0].content[0]"),
    "output for an unknown call": (
        {"input": [USER, {"type": "function_call_output", "call_id": "nope", "output": "x"}]}, "input"),
    "reference to an unknown item": ({"input": [{"type": "item_reference", "id": "msg_unknown"}]}, "input[0].id"),
    "approval answer not last": ({"input": [{"type": "mcp_approval_response", "approval_request_id": "mcpr_1",
                                             "approve": True}, USER]}, "input[0]"),
    "computer use tool": ({"tools": [{"type": "computer_use_preview", "display_width": 1, "display_height": 1,
                                      "environment": "linux"}]}, "tools[0].type"),
    "namespace named functions": ({"tools": [NAMESPACE | {"name": "functions"}]}, "tools[0].name"),
    "namespace with a custom tool": ({"tools": [NAMESPACE | {"tools": [{"type": "custom", "name": "patch"}]}]},
                                     "tools[0].tools[0].type"),
    "unknown effort": ({"reasoning": {"effort": "ultra"}}, "reasoning.effort"),
    "conversation with previous_response_id": ({"conversation": "conv_1", "previous_response_id": "resp_1"},
                                               "conversation"),
    "conversation of another type": ({"conversation": ["conv_1"]}, "conversation"),
    "tool_choice naming no function of tools": ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "x"}},
                                                "tool_choice"),
    "tool_choice forcing an MCP server not in tools": ({"tool_choice": {"type": "mcp", "server_label": "calc"}},
                                                       "tool_choice"),
    "tool_choice forcing file search": ({"tool_choice": {"type": "file_search"}}, "tool_choice.type"),
    # Names as OpenAI checks them; a space or a dot would also end or split harmony's recipient.
    "function named with a space": ({"tools": [WEATHER | {"name": "get weather"}]}, "tools[0].name"),
    "function named past 64 characters": ({"tools": [WEATHER | {"name": "f" * 65}]}, "tools[0].name"),
    "namespace function named with a dot": (
        {"tools": [NAMESPACE | {"tools": [{"type": "function", "name": "spawn.agent"}]}]}, "tools[0].tools[0].name"),
    "MCP server labelled with a space": ({"tools": [{"type": "mcp", "server_label": "my calc",
                                                     "server_url": "https://calc.example/mcp"}]},
                                         "tools[0].server_label"),
    "json_schema format without a name": ({"text": {"format": {"type": "json_schema", "schema": {}}}},
                                          "text.format.name"),
    "json_schema format without a schema": ({"text": {"format": {"type": "json_schema", "name": "x"}}},
                                            "text.format.schema"),
    "metadata key past 64 characters": ({"metadata": {"k" * 65: "v"}}, "metadata"),
    "metadata value past 512 characters": ({"metadata": {"k": "v" * 513}}, "metadata.k"),
    "max_output_tokens below 16": ({"max_output_tokens": 15}, "max_output_tokens"),
    # OpenAI's rule: the input messages must ask for JSON; instructions do not count.
    "json_object with no input message saying json": (
        {"input": "hi", "instructions": "Answer in JSON.", "text": {"format": {"type": "json_object"}}}, "input"
    ),
}


@pytest.fixture
def settings(database_url: str, redis_url: str) -> Settings:
    # A browser backend is configured (nothing listens there: these requests never reach a worker),
    # and a sealing key, as Codex asks for encrypted reasoning.
    return Settings(database_url=database_url, redis_url=redis_url, models=[MODEL],
                    tool_servers={"web_search_preview": "https://docs.example/mcp"}, encryption_keys=[new_key()])


def _stored(api: ApiServer, redis: redis_lib.Redis) -> tuple[int, int, int]:
    rows = api.db.run(lambda session: session.execute(select(func.count()).select_from(ResponseRow)).scalar_one())
    return rows, len(redis.keys("oss:events:*")), redis.llen(api.settings.queue_for(MODEL))


@pytest.mark.parametrize("body", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_create_response_accepts_request_shape(http: httpx2.Client, body: dict[str, Any]) -> None:
    response = http.post("/v1/responses", json={"model": MODEL, "background": True} | body)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "queued"


def test_create_response_with_output_for_unknown_call_is_openais_error(http: httpx2.Client) -> None:
    # OpenAI's 400 for this names the whole input (continuedev/continue#10092 quotes it), not the item.
    orphan = {"type": "function_call_output", "call_id": "call_nope", "output": "x"}
    response = http.post("/v1/responses", json={"model": MODEL, "input": [USER, orphan]})
    assert response.status_code == 400
    assert response.json() == {"error": {
        "message": "No tool call found for function call output with call_id call_nope.",
        "type": "invalid_request_error", "param": "input", "code": None}}


@pytest.mark.parametrize(("body", "param"), REFUSED.values(), ids=REFUSED.keys())
def test_create_response_refuses_unusable_shape_storing_nothing(
    http: httpx2.Client, api: ApiServer, redis: redis_lib.Redis, body: dict[str, Any], param: str
) -> None:
    before = _stored(api, redis)
    response = http.post("/v1/responses", json={"model": MODEL, "background": True} | body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert _stored(api, redis) == before
