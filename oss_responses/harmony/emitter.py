"""The one place where events get their ``sequence_number``.

Every event of a response is built through :meth:`EventEmitter.emit`, which numbers it with the
next integer; nothing else in the package sets ``sequence_number``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

E = TypeVar("E", bound=BaseModel)


class EventEmitter:
    """Builds events with consecutive sequence numbers and collects them until drained."""

    __slots__ = ("next_sequence_number", "_pending")

    def __init__(self, first_sequence_number: int) -> None:
        self.next_sequence_number = first_sequence_number
        self._pending: list[BaseModel] = []

    def emit(self, event_type: type[E], **fields: Any) -> E:
        event = event_type(sequence_number=self.next_sequence_number, **fields)
        self.next_sequence_number += 1
        self._pending.append(event)
        return event

    def drain(self) -> list[BaseModel]:
        """The events emitted since the last drain, in order."""
        events, self._pending = self._pending, []
        return events
