"""openai models as JSON on the wire (``oss_responses.wire``): what strict clients get."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import ResponseOutputItemDoneEvent
from openai.types.responses.response_output_item import McpListTools, McpListToolsTool

from oss_responses.harmony.lifecycle import usage
from oss_responses.wire import event_json, item_on_the_wire, on_the_wire, wire_json


def _listing(error: str | None = None) -> McpListTools:
    tool = McpListToolsTool(name="add", input_schema={"type": "object"})
    return McpListTools(type="mcp_list_tools", id="mcpl_1", server_label="calc", tools=[tool], error=error)


def test_mcp_list_tools_item_leaves_out_absent_error_and_tool_fields() -> None:
    item = item_on_the_wire(wire_json(_listing()))
    assert "error" not in item
    assert item["tools"] == [{"name": "add", "input_schema": {"type": "object"}}]


def test_mcp_list_tools_item_keeps_error_it_has() -> None:
    assert item_on_the_wire(wire_json(_listing("unreachable")))["error"] == "unreachable"


def test_output_item_event_carries_item_as_on_the_wire() -> None:
    event = ResponseOutputItemDoneEvent(type="response.output_item.done", item=_listing(), output_index=0,
                                        sequence_number=3)
    assert "error" not in json.loads(event_json(event))["item"]


def test_usage_details_hold_only_counts() -> None:
    response = {"usage": wire_json(usage(10, None, 5, 2)), "output": [wire_json(_listing())]}
    on_the_wire(response)
    assert response["usage"]["input_tokens_details"] == {"cached_tokens": 0, "cache_write_tokens": 0}
    assert "error" not in response["output"][0]


@pytest.mark.parametrize(("status", "kept"), [("in_progress", False), ("completed", False), ("incomplete", True)])
def test_reasoning_item_on_the_wire_has_status_only_when_cut_short(status: str, kept: bool) -> None:
    # OpenAI's reasoning items carry neither a status nor, unless asked for, encrypted_content.
    item = item_on_the_wire({"type": "reasoning", "id": "rs_1", "summary": [], "status": status,
                             "encrypted_content": None})
    assert ("status" in item, "encrypted_content" in item) == (kept, False)


def test_reasoning_item_on_the_wire_keeps_encrypted_content_asked_for() -> None:
    assert item_on_the_wire({"type": "reasoning", "encrypted_content": "gAAA"})["encrypted_content"] == "gAAA"
