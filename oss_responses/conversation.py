"""A stored chain of responses as the history render reads, for the API (checking a request before
it is stored) and the worker (rendering it).

A chain is cut when one of its responses was deleted: the turns older than the deleted one can no
longer be reached. Continuing such a conversation would silently drop its beginning, so it is
refused (:class:`BrokenChain`) instead: the API answers 400, a worker fails the response.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from oss_responses.config import Settings
from oss_responses.harmony.history import ConversationTurn, turn_items
from oss_responses.harmony.render import McpToolSpec, RenderOptions
from oss_responses.storage import ResponseRecord
from oss_responses.storage.responses import MAX_CHAIN_DEPTH


class BrokenChain(Exception):
    """An earlier response of the conversation is gone (deleted), or the chain is beyond the depth guard."""


def check_chain(chain: list[ResponseRecord]) -> None:
    """Raise BrokenChain unless ``chain`` (oldest first) reaches the conversation's first response."""
    if not chain or chain[0].previous_response_id is None:
        return
    if len(chain) > MAX_CHAIN_DEPTH:
        raise BrokenChain(f"the conversation is longer than {MAX_CHAIN_DEPTH} responses")
    raise BrokenChain(
        f"response '{chain[0].previous_response_id}', an earlier turn of this conversation, was deleted"
    )


def turn_of(record: ResponseRecord) -> ConversationTurn:
    """A stored turn: its messages, function calls, and items (its tool lists and approval requests)."""
    items = turn_items(record.request.get("input"), record.response.get("output", []))
    return ConversationTurn(record.input_messages + record.output_messages, dict(record.function_calls), items)


def history_of(chain: list[ResponseRecord]) -> list[ConversationTurn]:
    check_chain(chain)
    return [turn_of(record) for record in chain]


def render_options(
    settings: Settings, created_at: datetime, mcp_tools: Mapping[str, list[McpToolSpec]] | None = None
) -> RenderOptions:
    return RenderOptions(
        conversation_start_date=created_at.astimezone(UTC).date().isoformat(),
        knowledge_cutoff=settings.knowledge_cutoff,
        default_reasoning_effort=settings.default_reasoning_effort,
        builtin_tool_labels=settings.builtin_tool_labels,
        mcp_tools=dict(mcp_tools or {}),
    )
