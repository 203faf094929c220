"""Items of OpenAI's hosted tools that gpt-oss serves with a built-in: a ``browser`` call made for a
request's ``web_search`` tool streams as a ``web_search_call``, as OpenAI streams it (the ``browser``
of an MCP server label stays an ``mcp_call``, see ``items.py``).

:class:`WebSearchCallBuilder`: silent while the model writes its arguments (OpenAI streams none);
at ``<|call|>`` ``output_item.added`` (``in_progress``, its action) → ``web_search_call.in_progress``
→ ``web_search_call.searching``; the result: ``web_search_call.completed`` → ``output_item.done``
(``completed``); a failure: ``output_item.done`` (``failed``; OpenAI has no failed event for it).

The item carries the action, not the result (OpenAI's does not either); the model reads the result
in the tool message, which the stored turn keeps.
"""

from __future__ import annotations

import json
from typing import Any

from openai.types.responses import (
    ResponseFunctionWebSearch,
    ResponseOutputItemAddedEvent,
    ResponseWebSearchCallCompletedEvent,
    ResponseWebSearchCallInProgressEvent,
    ResponseWebSearchCallSearchingEvent,
)
from openai.types.responses.response_function_web_search import ActionFind, ActionOpenPage, ActionSearch
from pydantic import BaseModel

from oss_responses.harmony.items import ItemStatus, McpCallBuilder, McpCallStatus, QuietBuilder


class WebSearchCallBuilder(QuietBuilder, McpCallBuilder):
    """A ``browser.search`` / ``open`` / ``find`` call of a hosted web search tool. It runs as an MCP
    call does (``server_label`` is the tool's type, ``name`` the browser action); only its item differs."""

    id_prefix = "ws"

    def end_message(self, status: ItemStatus) -> BaseModel | None:
        if status != "completed":
            return None  # cut before <|call|>: never shown, nothing to close
        self._emit(ResponseOutputItemAddedEvent, item=self._item(self.text, "in_progress"))
        self._emit(ResponseWebSearchCallInProgressEvent)
        self._emit(ResponseWebSearchCallSearchingEvent)
        self.awaiting_result = True
        return None

    def complete(self, output: str) -> BaseModel:
        self._emit(ResponseWebSearchCallCompletedEvent)
        return self._finish(self._item(self.text, "completed"))

    def fail(self, error: str) -> BaseModel:
        return self._finish(self._item(self.text, "failed"))

    def abandon(self) -> BaseModel | None:
        return self._finish(self._item(self.text, "incomplete")) if self.awaiting_result else None

    def _item(self, text: str, status: McpCallStatus, **result: Any) -> BaseModel:
        return ResponseFunctionWebSearch(
            type="web_search_call", id=self.item_id, status=status, action=web_search_action(self.name, text)
        )


def web_search_action(name: str, arguments: str) -> ActionSearch | ActionOpenPage | ActionFind:
    """The item's ``action`` from the browser call the model wrote: ``search`` (its query), ``open``
    (``open_page``, with the URL when the model opened one by URL rather than by a result's number),
    ``find`` (``find_in_page``; the page is the one open in the model's browser, which the call does
    not name, so its ``url`` is empty). Arguments that are not a JSON object are the query."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        parsed = None
    fields = parsed if isinstance(parsed, dict) else {}
    if name == "open":
        target = fields.get("id")
        return ActionOpenPage(type="open_page", url=target if isinstance(target, str) and "://" in target else None)
    if name == "find":
        return ActionFind(type="find_in_page", pattern=str(fields.get("pattern", "")), url="")
    query = fields.get("query") if parsed is not None else arguments
    return ActionSearch(type="search", query=str(query) if query is not None else "")
