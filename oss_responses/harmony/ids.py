"""Ids of responses, items and calls: an OpenAI-style prefix plus random hex.

``resp_`` responses, ``msg_`` messages, ``rs_`` reasoning, ``fc_`` function-call items,
``call_`` function-call call ids, ``mcp_`` MCP-call items, ``mcpl_`` MCP tool lists,
``mcpr_`` MCP approval requests.
"""

from __future__ import annotations

import hashlib
import secrets


def new_id(prefix: str) -> str:
    """``prefix_`` + 48 random hex digits (what OpenAI's ids look like, near enough)."""
    return f"{prefix}_{secrets.token_hex(24)}"


def response_id() -> str:
    return new_id("resp")


class IdSource:
    """Item and call ids for one response: random, or, with a ``seed``, the same sequence every time.

    A worker that takes a response over replays its translator; seeded ids make the replay name every
    item exactly as the stream already did (the seed is the response id, the n-th id its hash).
    """

    __slots__ = ("_seed", "_count")

    def __init__(self, seed: str | None = None) -> None:
        self._seed = seed
        self._count = 0

    def new(self, prefix: str) -> str:
        if self._seed is None:
            return new_id(prefix)
        self._count += 1
        digest = hashlib.sha256(f"{self._seed}:{self._count}".encode()).hexdigest()
        return f"{prefix}_{digest[:48]}"
