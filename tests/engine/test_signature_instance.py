"""Arguments read from the TypeScript signature harmony renders for a function's JSON schema."""

from __future__ import annotations

from typing import Any

import pytest
from openai_harmony import Conversation, DeveloperContent, HarmonyEncoding, Message, Role, ToolDescription

from oss_responses.engine.signature_instance import arguments_of


def developer_text(enc: HarmonyEncoding, parameters: dict[str, Any] | None, name: str = "f") -> str:
    """The developer message harmony renders for one function with ``parameters``."""
    content = DeveloperContent.new().with_function_tools([ToolDescription.new(name, "A tool.", parameters=parameters)])
    message = Message.from_role_and_content(Role.DEVELOPER, content)
    return enc.decode(enc.render_conversation(Conversation.from_messages([message])))


def obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties) if required is None else required}


@pytest.mark.parametrize(("parameters", "arguments"), [
    (None, {}),
    ({"type": "object"}, {}),
    (obj({"city": {"type": "string", "description": "The city"}}), {"city": "hello"}),
    (obj({"n": {"type": "integer"}, "x": {"type": "number"}, "ok": {"type": "boolean"}}),
     {"n": 0, "x": 0, "ok": False}),
    (obj({"unit": {"type": "string", "enum": ["c", "f"], "default": "c"}}), {"unit": "c"}),
    (obj({"tags": {"type": "array", "items": {"type": "string"}}}), {"tags": []}),
    (obj({"loc": obj({"lat": {"type": "number"}, "lon": {"type": "number"}})}), {"loc": {"lat": 0, "lon": 0}}),
    (obj({"city": {"type": "string"}, "note": {"type": "string"}}, required=["city"]), {"city": "hello"}),
    (obj({"maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]}}), {"maybe": None}),
    (obj({"kind": {"type": ["null", "string"]}}), {"kind": "hello"}),
])
def test_arguments_of_function_fit_its_signature(
    encoding: HarmonyEncoding, parameters: dict[str, Any] | None, arguments: dict[str, Any]
) -> None:
    assert arguments_of(developer_text(encoding, parameters), "functions", "f", text="hello") == arguments


def test_arguments_of_function_not_declared_are_none(encoding: HarmonyEncoding) -> None:
    text = developer_text(encoding, obj({"a": {"type": "string"}}))
    assert arguments_of(text, "functions", "g") is None
    assert arguments_of(text, "calc", "f") is None


def test_arguments_of_unreadable_signature_are_none() -> None:
    text = "namespace functions {\n\ntype f = (_: {\na: Map<string, number> | %,\n}) => any;\n\n}"
    assert arguments_of(text, "functions", "f") is None


def test_arguments_of_function_in_other_namespace_come_from_its_own(encoding: HarmonyEncoding) -> None:
    text = "namespace calc {\n\ntype f = (_: {\nb: number,\n}) => any;\n\n}\n" + developer_text(
        encoding, obj({"a": {"type": "string"}}))
    assert arguments_of(text, "calc", "f") == {"b": 0}
    assert arguments_of(text, "functions", "f", text="x") == {"a": "x"}
