"""The one place where events get their ``sequence_number`` and their ``type``.

Every event of a response is built through :meth:`EventEmitter.emit`, which numbers it with the
next integer and types it with the string its openai class declares; nothing else in the package
sets ``sequence_number`` or writes an event type out.
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar, get_args

from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel

from oss_responses.harmony.ids import IdSource

E = TypeVar("E", bound=ResponseStreamEvent)


@cache
def event_type(event_class: type[BaseModel]) -> str:
    """The wire ``type`` of an openai event class (its ``type`` field's one Literal value)."""
    (value,) = get_args(event_class.model_fields["type"].annotation)
    if not isinstance(value, str):
        raise TypeError(f"{event_class.__name__}.type is not a string literal")
    return value


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

    def emit(self, event_class: type[E], **fields: Any) -> E:
        # Upcast for event_type's cache: mypy sees no __hash__ on type[E] when E is bound to a union.
        wire_class: type[BaseModel] = event_class
        event = event_class(type=event_type(wire_class), sequence_number=self.next_sequence_number, **fields)
        self.next_sequence_number += 1
        self._pending.append(event)
        return event

    def drain(self) -> list[ResponseStreamEvent]:
        """The events emitted since the last drain, in order."""
        events, self._pending = self._pending, []
        return events
