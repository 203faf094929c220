"""The one place where events get their ``sequence_number``.

Every event of a response is built through :meth:`EventEmitter.emit`, which numbers it with the
next integer; nothing else in the package sets ``sequence_number``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from openai.types.responses import ResponseStreamEvent

from oss_responses.harmony.ids import IdSource

E = TypeVar("E", bound=ResponseStreamEvent)


class EventEmitter:
    """Builds events with consecutive sequence numbers and collects them until drained.

    It also names the items the events are about (``new_id``), so that one seed makes a response's
    whole event sequence, ids included, reproducible.
    """

    __slots__ = ("next_sequence_number", "_pending", "_ids")

    def __init__(self, first_sequence_number: int, id_seed: str | None = None) -> None:
        self.next_sequence_number = first_sequence_number
        self._pending: list[ResponseStreamEvent] = []
        self._ids = IdSource(id_seed)

    def new_id(self, prefix: str) -> str:
        return self._ids.new(prefix)

    def emit(self, event_type: type[E], **fields: Any) -> E:
        event = event_type(sequence_number=self.next_sequence_number, **fields)
        self.next_sequence_number += 1
        self._pending.append(event)
        return event

    def drain(self) -> list[ResponseStreamEvent]:
        """The events emitted since the last drain, in order."""
        events, self._pending = self._pending, []
        return events
