"""A process builds the openai types' validators while it starts, not during its first response."""

from __future__ import annotations

from oss_responses.schemas import build_protocol_schemas, protocol_models


def test_protocol_models_cover_events_items_and_response() -> None:
    names = {model.__name__ for model in protocol_models()}
    assert {"Response", "ResponseTextDeltaEvent", "ResponseOutputMessage", "ResponseFunctionToolCall"} <= names


def test_build_protocol_schemas_leaves_no_protocol_model_unbuilt() -> None:
    build_protocol_schemas("test")
    assert [m.__name__ for m in protocol_models() if not m.__pydantic_complete__] == []
    assert build_protocol_schemas("test") == 0  # a second call has nothing left to build
