"""Builders of the MCP items that are not a streamed tool call (see ``items.py`` for those).

- :class:`ListToolsBuilder`       ``mcp_list_tools``: added → in_progress → completed | failed → done
- :class:`ApprovalRequestBuilder` a call that needs approval: silent while the model writes it, then
  ``mcp_approval_request`` added + done at ``<|call|>`` (OpenAI shows no arguments streaming for it)
- :class:`ApprovedCallBuilder`    the approved call, opened in the next response with its arguments
  whole: added → mcp_call.in_progress → mcp_call_arguments.done, then completed | failed like any call
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openai.types.responses import (
    ResponseMcpListToolsCompletedEvent,
    ResponseMcpListToolsFailedEvent,
    ResponseMcpListToolsInProgressEvent,
    ResponseOutputItemAddedEvent,
)
from openai.types.responses.response_output_item import McpApprovalRequest, McpListTools
from pydantic import BaseModel

from oss_responses.harmony.emitter import EventEmitter
from oss_responses.harmony.items import ItemBuilder, ItemStatus, McpCallBuilder, McpCallStatus, QuietBuilder
from oss_responses.harmony.mcp_tools import list_entries


class ListToolsBuilder(ItemBuilder):
    """One server's tool listing; it carries no text, only the list or the error at the end."""

    id_prefix = "mcpl"

    def __init__(self, emitter: EventEmitter, output_index: int, server_label: str) -> None:
        super().__init__(emitter, output_index)
        self.server_label = server_label

    def open(self) -> None:
        super().open()
        self._emit(ResponseMcpListToolsInProgressEvent)

    def complete(self, tools: Sequence[Any]) -> BaseModel:
        self._emit(ResponseMcpListToolsCompletedEvent)
        return self._finish(self._list_item(list_entries(tools), None))

    def fail(self, message: str) -> BaseModel:
        self._emit(ResponseMcpListToolsFailedEvent)
        return self._finish(self._list_item([], message))

    def _done(self, status: str) -> BaseModel:  # cut by cancel or failure while listing
        return self.fail("The tool listing was interrupted: the response ended before the server answered.")

    def _item(self, text: str, status: str) -> BaseModel:
        return self._list_item([], None)

    def _list_item(self, tools: list[Any], error: str | None) -> BaseModel:
        return McpListTools(
            type="mcp_list_tools", id=self.item_id, server_label=self.server_label, tools=tools, error=error
        )


class ApprovalRequestBuilder(QuietBuilder):
    """Buffers the call's arguments without events; the item appears whole when the call ends."""

    id_prefix = "mcpr"

    def __init__(self, emitter: EventEmitter, output_index: int, server_label: str, name: str) -> None:
        super().__init__(emitter, output_index)
        self.server_label = server_label
        self.name = name

    def end_message(self, status: ItemStatus) -> BaseModel | None:
        if status != "completed":
            return None
        item = self._item(self.text, status)
        self._emit(ResponseOutputItemAddedEvent, item=item)
        return self._finish(item)

    def abandon(self) -> BaseModel | None:
        return None  # a call cut before <|call|> was never shown: nothing to close

    def _item(self, text: str, status: str) -> BaseModel:
        return McpApprovalRequest(
            type="mcp_approval_request", id=self.item_id, server_label=self.server_label, name=self.name, arguments=text
        )


class ApprovedCallBuilder(McpCallBuilder):
    """The call an ``mcp_approval_response`` approved, run in the response that carries the answer."""

    def __init__(
        self, emitter: EventEmitter, output_index: int, server_label: str, name: str, arguments: str,
        approval_request_id: str,
    ) -> None:
        super().__init__(emitter, output_index, server_label, name)
        self.approval_request_id = approval_request_id
        self._chunks = [arguments]

    def open(self) -> None:
        self._emit(ResponseOutputItemAddedEvent, item=self._item(self.text, "in_progress"))
        self._emit_in_progress()
        self.end_message("completed")  # arguments.done; now awaiting the result

    def _item(self, text: str, status: McpCallStatus, **result: Any) -> BaseModel:
        return super()._item(text, status, approval_request_id=self.approval_request_id, **result)
