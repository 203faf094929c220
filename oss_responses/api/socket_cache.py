"""A Responses WebSocket's connection-local cache: the latest response of each lane, as input items.

Over the socket, a client continues a conversation by sending only the new items and the last
response's id, even when that response was not stored (``store: false``, as Codex sends) or was a
warm-up (``generate: false``): OpenAI keeps that state in the connection's memory. A stored response
needs no cache (SQL has its chain); an unstored one is gone from SQL once it ended, so its conversation
is kept here, and a ``previous_response_id`` naming it is replaced by its items: the request becomes
the one a client keeping the conversation itself would send.

Only the latest response of each lane is kept, as OpenAI keeps it: another lane may fork from it until
its own lane moves on; the socket's close forgets all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class CachedTurn:
    response_id: str
    stored: bool  # stored: SQL has the chain, and a continuation goes there as over HTTP
    previous_response_id: str | None  # the stored response its conversation continues, if any
    items: tuple[dict[str, Any], ...]  # its conversation after that: the input it was given, then its output


def input_list(body: dict[str, Any]) -> list[Any] | None:
    """A create body's ``input`` as a list of items (a string is one user message); None if malformed."""
    value = body.get("input", [])
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return value if isinstance(value, list) else None


def turn_of(body: dict[str, Any], response_id: str, output: list[dict[str, Any]]) -> CachedTurn:
    """What a later turn needs of a response created from ``body`` (as expanded) that ended with ``output``."""
    return CachedTurn(
        response_id=response_id,
        stored=body.get("store", True) is not False,
        previous_response_id=body.get("previous_response_id"),
        items=(*(input_list(body) or ()), *output),
    )


class ConnectionCache:
    def __init__(self) -> None:
        self._latest: dict[str | None, CachedTurn] = {}

    def remember(self, lane: str | None, turn: CachedTurn) -> None:
        self._latest[lane] = turn

    def find(self, response_id: str) -> tuple[str | None, CachedTurn] | None:
        for lane, turn in self._latest.items():
            if turn.response_id == response_id:
                return lane, turn
        return None

    def forget(self, lane: str | None, response_id: str) -> None:
        """Drop ``lane``'s latest response if it is ``response_id`` (a continuation of it failed)."""
        if (turn := self._latest.get(lane)) is not None and turn.response_id == response_id:
            del self._latest[lane]

    def expand(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with a ``previous_response_id`` that names an unstored cached response replaced by
        that response's items; any other body as it is."""
        previous = body.get("previous_response_id")
        found = self.find(previous) if isinstance(previous, str) else None
        new_input = input_list(body)
        if found is None or found[1].stored or new_input is None:
            return body
        turn = found[1]
        return body | {"input": [*turn.items, *new_input], "previous_response_id": turn.previous_response_id}
