"""Open event streams per key owner in one API process: SSE relays and WebSocket connections.

Each open stream holds a connection, a task and its share of the relay's CPU (every event is written to
every follower of its response): one owner's 800 followers of a response slowed every other owner's
requests to seconds (the security probe). The per-owner limits on responses in flight do not count
followers, nor connections that wait. An owner past ``max_streams_per_key`` here gets a 429 before
anything is stored or opened; other API processes count their own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from oss_responses.errors import TooManyRequests

if TYPE_CHECKING:
    from oss_responses.api.auth import Owner  # which needs the services, which hold the slots

RETRY_AFTER_SECONDS = 5

Release = Callable[[], None]


def _nothing() -> None:
    pass


class StreamSlots:
    def __init__(self, limit: int) -> None:
        self._limit = limit  # 0: no limit
        self._open: Counter[str] = Counter()

    def open_for(self, owner: str) -> int:
        return self._open[owner]

    def take(self, owner: Owner) -> Release:
        """A slot for one of ``owner``'s streams, or a 429; what is returned gives it back (once)."""
        name = owner.name
        if name is None or self._limit <= 0:
            return _nothing
        if self._open[name] >= self._limit:
            raise TooManyRequests(
                f"This API key's owner already has {self._limit} event streams open on this server, the most it "
                f"may; nothing was started. Retry after {RETRY_AFTER_SECONDS} seconds, or once one has closed.",
                code="too_many_streams", headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        self._open[name] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._open[name] -= 1
                if not self._open[name]:
                    del self._open[name]

        return release
