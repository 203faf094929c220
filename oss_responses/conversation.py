"""A stored chain of responses as the history render reads, for the API (checking a request before
it is stored) and the worker (rendering it).

A chain is cut when one of its responses was deleted: the turns older than the deleted one can no
longer be reached. Continuing such a conversation would silently drop its beginning, so it is
refused (:class:`BrokenChain`) instead: the API answers 400, a worker fails the response.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from oss_responses.config import Settings
from oss_responses.errors import BadRequest
from oss_responses.harmony.history import ConversationTurn, turn_items
from oss_responses.harmony.render import McpToolSpec, RenderOptions, items_turn
from oss_responses.request_items import parse_input_item
from oss_responses.sealing import Sealer
from oss_responses.storage import ResponseRecord
from oss_responses.storage.responses import MAX_CHAIN_DEPTH


class BrokenChain(Exception):
    """An earlier response of the conversation is gone (deleted), or the chain is beyond the depth guard."""


def check_chain(chain: list[ResponseRecord]) -> None:
    """Raise BrokenChain unless ``chain`` (oldest first) reaches the conversation's first response.

    Deleting a response sets its successor's link to NULL, so the link the request named (kept in
    the stored request) is what tells a cut chain from a conversation's first turn.
    """
    if not chain:
        return
    named = chain[0].request.get("previous_response_id")
    if named is None:
        return
    if len(chain) > MAX_CHAIN_DEPTH:
        raise BrokenChain(f"the conversation is longer than {MAX_CHAIN_DEPTH} responses")
    raise BrokenChain(f"response '{named}', an earlier turn of this conversation, was deleted")


def turn_of(record: ResponseRecord) -> ConversationTurn:
    """A stored turn: its messages, function calls, and items (its tool lists and approval requests)."""
    items = turn_items(record.request.get("input"), record.response.get("output", []))
    return ConversationTurn(record.input_messages + record.output_messages, dict(record.function_calls), items)


def history_of(chain: list[ResponseRecord]) -> list[ConversationTurn]:
    check_chain(chain)
    return [turn_of(record) for record in chain]


@dataclass(frozen=True, slots=True)
class ConversationPrefix:
    """A conversation's items as a response in it is given them, before its input (and before the turns
    of a chain that continues that response). Read when the response is accepted, which records
    ``through``; the worker and later turns read the items up to it again, so a response stores its own
    input only, not a copy of the conversation. An item deleted from the conversation meanwhile is gone
    from what they read."""

    conversation_id: str
    through: int  # the position of the conversation's last item then (-1: it had none)
    items: list[dict[str, Any]]

    def turn(self, options: RenderOptions) -> ConversationTurn:
        """The items as the first earlier turn; one that cannot be rendered is a 400 naming the conversation."""
        try:
            parsed = [parse_input_item(item, f"conversation.items[{n}]") for n, item in enumerate(self.items)]
            return items_turn(parsed, self.items, options)
        except BadRequest as exc:
            raise BadRequest(
                f"An item of conversation '{self.conversation_id}' cannot be given to the model: {exc.message}",
                param="conversation",
            ) from exc


def prefix_position(chain: list[ResponseRecord]) -> tuple[str, int] | None:
    """The conversation, and how far, that comes before a chain: its first response's, if that one was in
    a conversation (a response in one has no ``previous_response_id``, so only a chain's first can be).
    None for rows from before migration 0009, whose stored request holds the conversation's items."""
    first = chain[0] if chain else None
    if first is None or first.conversation_through is None or not first.request.get("conversation"):
        return None
    return first.request["conversation"], first.conversation_through


def with_prefix(
    history: list[ConversationTurn], prefix: ConversationPrefix | None, options: RenderOptions
) -> list[ConversationTurn]:
    return history if prefix is None else [prefix.turn(options), *history]


def render_options(
    settings: Settings,
    created_at: datetime,
    mcp_tools: Mapping[str, list[McpToolSpec]] | None = None,
    sealer: Sealer | None = None,
    owner: str | None = None,
) -> RenderOptions:
    """``owner``: whose sealed blobs the render may open (``sealing.py``; None: open mode)."""
    return RenderOptions(
        conversation_start_date=created_at.astimezone(UTC).date().isoformat(),
        knowledge_cutoff=settings.knowledge_cutoff,
        default_reasoning_effort=settings.default_reasoning_effort,
        builtin_tool_labels=settings.builtin_tool_labels,
        mcp_tools=dict(mcp_tools or {}),
        unseal=sealer.opening(owner) if sealer is not None else None,
    )
