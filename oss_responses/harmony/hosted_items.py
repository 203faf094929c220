"""Items of OpenAI's hosted tools that gpt-oss serves with a built-in: a ``browser`` call made for a
request's ``web_search`` tool streams as a ``web_search_call``, a ``python`` call made for its
``code_interpreter`` tool as a ``code_interpreter_call``, as OpenAI streams them (the built-in of an
MCP server label stays an ``mcp_call``, see ``items.py``).

:class:`WebSearchCallBuilder`: silent while the model writes its arguments (OpenAI streams none);
at ``<|call|>`` ``output_item.added`` (``in_progress``, its action) → ``web_search_call.in_progress``
→ ``web_search_call.searching``; the result: ``web_search_call.completed`` → ``output_item.done``
(``completed``); a failure: ``output_item.done`` (``failed``; OpenAI has no failed event for it).

The item carries the action, not the result (OpenAI's does not either); the model reads the result
in the tool message, which the stored turn keeps. When ``include`` asks for
``web_search_call.action.sources``, a completed search's action lists the URLs its result holds.

:class:`CodeInterpreterCallBuilder`: ``output_item.added`` (``in_progress``) →
``code_interpreter_call.in_progress`` → ``code_interpreter_call_code.delta``* as the model writes
the code → ``code_interpreter_call_code.done`` → ``code_interpreter_call.interpreting`` (at
``<|call|>``); the result: ``code_interpreter_call.completed`` → ``output_item.done``
(``completed``); a failure: ``output_item.done`` (``failed``; OpenAI has no failed event for it).
Its ``outputs`` hold the result as logs only when the request's ``include`` asks for
``code_interpreter_call.outputs``, as OpenAI's do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from openai.types.responses import (
    ResponseCodeInterpreterCallCodeDeltaEvent,
    ResponseCodeInterpreterCallCodeDoneEvent,
    ResponseCodeInterpreterCallCompletedEvent,
    ResponseCodeInterpreterCallInProgressEvent,
    ResponseCodeInterpreterCallInterpretingEvent,
    ResponseCodeInterpreterToolCall,
    ResponseFunctionWebSearch,
    ResponseOutputItemAddedEvent,
    ResponseWebSearchCallCompletedEvent,
    ResponseWebSearchCallInProgressEvent,
    ResponseWebSearchCallSearchingEvent,
)
from openai.types.responses.response_code_interpreter_tool_call import OutputLogs
from openai.types.responses.response_function_web_search import (
    ActionFind,
    ActionOpenPage,
    ActionSearch,
    ActionSearchSource,
)
from pydantic import BaseModel

from oss_responses.harmony.emitter import EventEmitter
from oss_responses.harmony.items import ItemStatus, McpCallBuilder, McpCallStatus, QuietBuilder

# The ``include`` values asking for a code interpreter call's outputs and a web search's sources.
CODE_INTERPRETER_OUTPUTS = "code_interpreter_call.outputs"
WEB_SEARCH_SOURCES = "web_search_call.action.sources"
# A URL in a search result, whatever its format (JSON fields, harmony's browser citations, text).
_URL = re.compile(r"https?://[^\s\"'<>\\\]\)}†】]+")


@dataclass(frozen=True)
class HostedCalls:
    """What a request asks its hosted tools' items to show (``render.hosted_calls``): the container its
    code interpreter names (None: ``auto``, one container id per response), a code call's outputs,
    a web search's sources (``include``)."""

    container_id: str | None = None
    code_outputs: bool = False
    search_sources: bool = False


DEFAULT_HOSTED_CALLS = HostedCalls()


class WebSearchCallBuilder(QuietBuilder, McpCallBuilder):
    """A ``browser.search`` / ``open`` / ``find`` call of a hosted web search tool. It runs as an MCP
    call does (``server_label`` is the tool's type, ``name`` the browser action); only its item differs.
    With ``show_sources``, a completed search's action lists the URLs its result holds."""

    id_prefix = "ws"

    def __init__(
        self, emitter: EventEmitter, output_index: int, server_label: str, name: str, *, show_sources: bool,
    ) -> None:
        super().__init__(emitter, output_index, server_label, name)
        self.show_sources = show_sources

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
        sources = web_search_sources(output) if self.show_sources else None
        return self._finish(self._item(self.text, "completed", sources=sources))

    def fail(self, error: str) -> BaseModel:
        return self._finish(self._item(self.text, "failed"))

    def pass_over(self, error: str) -> BaseModel:
        """Not shown while written: the item appears failed, without a search."""
        self._emit(ResponseOutputItemAddedEvent, item=self._item(self.text, "in_progress"))
        return self.fail(error)

    def abandon(self) -> BaseModel | None:
        return self._finish(self._item(self.text, "incomplete")) if self.awaiting_result else None

    def _item(
        self, text: str, status: McpCallStatus, *, sources: list[ActionSearchSource] | None = None, **result: Any
    ) -> BaseModel:
        action = web_search_action(self.name, text, sources)
        return ResponseFunctionWebSearch(type="web_search_call", id=self.item_id, status=status, action=action)


def web_search_sources(result: str) -> list[ActionSearchSource]:
    """The URLs a search's result holds, in order, each once: the sources OpenAI lists for a search."""
    urls = dict.fromkeys(match.rstrip(".,;:") for match in _URL.findall(result))
    return [ActionSearchSource(type="url", url=url) for url in urls]


def web_search_action(
    name: str, arguments: str, sources: list[ActionSearchSource] | None = None
) -> ActionSearch | ActionOpenPage | ActionFind:
    """The item's ``action`` from the browser call the model wrote: ``search`` (its query, and its
    ``sources`` when given), ``open``
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
    return ActionSearch(type="search", query=str(query) if query is not None else "", sources=sources)


class CodeInterpreterCallBuilder(McpCallBuilder):
    """A ``python`` call of a hosted code interpreter tool. It runs as an MCP call does (``server_label``
    is the tool's type); its item says which container ran it, and holds the code and, when asked
    for (``show_outputs``), the result as logs."""

    id_prefix = "ci"

    def __init__(
        self, emitter: EventEmitter, output_index: int, server_label: str, name: str, *, container_id: str,
        show_outputs: bool,
    ) -> None:
        super().__init__(emitter, output_index, server_label, name)
        self.container_id = container_id
        self.show_outputs = show_outputs

    def _emit_in_progress(self) -> None:
        self._emit(ResponseCodeInterpreterCallInProgressEvent)

    def _emit_running(self) -> None:
        self._emit(ResponseCodeInterpreterCallInterpretingEvent)

    def complete(self, output: str) -> BaseModel:
        self._emit(ResponseCodeInterpreterCallCompletedEvent)
        return self._finish(self._item(self.text, "completed", logs=output))

    def fail(self, error: str) -> BaseModel:
        return self._finish(self._item(self.text, "failed", logs=error))

    def _item(self, text: str, status: McpCallStatus, *, logs: str | None = None, **result: Any) -> BaseModel:
        outputs = [OutputLogs(type="logs", logs=logs)] if logs is not None and self.show_outputs else None
        return ResponseCodeInterpreterToolCall(
            type="code_interpreter_call", id=self.item_id, code=text, container_id=self.container_id,
            outputs=outputs, status=status,
        )

    def _emit_delta(self, delta: str) -> None:
        self._emit(ResponseCodeInterpreterCallCodeDeltaEvent, delta=delta)

    def _emit_text_done(self, text: str) -> None:
        self._emit(ResponseCodeInterpreterCallCodeDoneEvent, code=text)
