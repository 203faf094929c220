"""Conversations and their items (``/v1/conversations``): plain functions over a ``Session``.

An item's place is its ``position`` in the conversation, in the order items were added, never reused
once its item is deleted (``conversations.next_position``); an item id is there at most once (the item
routes name items by id). Reads take the owner: another owner's conversation is not found, exactly as
an unknown one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, Table, Text, delete, func, insert, select, update
from sqlalchemy.orm import Session

from oss_responses.errors import BadRequest
from oss_responses.storage.input_items import ITEM_REFERENCE, find_stored_items
from oss_responses.storage.models import ConversationItemRow, ConversationRow, InputItemRow
from oss_responses.storage.paging import page_items
from oss_responses.storage.records import Order, utcnow

_conversations = cast(Table, ConversationRow.__table__)
_items = cast(Table, ConversationItemRow.__table__)
_input_items = cast(Table, InputItemRow.__table__)


@dataclass(frozen=True, kw_only=True)
class ConversationRecord:
    id: str
    owner: str | None
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: datetime = field(default_factory=utcnow)


class DuplicateItem(BadRequest):
    """An item id the conversation already holds (or a batch holds twice)."""


def insert_conversation(session: Session, record: ConversationRecord, items: Sequence[dict[str, Any]]) -> None:
    session.execute(insert(_conversations).values(
        id=record.id, owner=record.owner, metadata=record.metadata, created_at=record.created_at))
    add_items(session, record.id, items)


def get_conversation(session: Session, conversation_id: str, owner: str | None) -> ConversationRecord | None:
    """The conversation, if ``owner`` may see it (None: open mode, every conversation)."""
    row = session.execute(select(_conversations).where(_conversations.c.id == conversation_id)).one_or_none()
    if row is None or (owner is not None and row.owner != owner):
        return None
    return ConversationRecord(id=row.id, owner=row.owner, metadata=row.metadata or {}, created_at=row.created_at)


def set_metadata(session: Session, conversation_id: str, metadata: dict[str, str]) -> None:
    session.execute(update(_conversations).where(_conversations.c.id == conversation_id).values(metadata=metadata))


def delete_conversation(session: Session, conversation_id: str) -> bool:
    """Whether it was there to delete (of two concurrent deletes, one deletes it)."""
    # Its items go too, explicitly: SQLite enforces the foreign key's cascade only with PRAGMA foreign_keys.
    session.execute(delete(_items).where(_items.c.conversation_id == conversation_id))
    deleted = session.execute(delete(_conversations).where(_conversations.c.id == conversation_id))
    return cast(CursorResult[Any], deleted).rowcount == 1


def add_items(session: Session, conversation_id: str, items: Sequence[dict[str, Any]]) -> None:
    """Append ``items`` (each with its ``id``) after the conversation's last item.

    Raises :class:`DuplicateItem` (nothing added) if an id is already there or repeated in ``items``.
    """
    if not items or not take_turns(session, conversation_id):
        return
    ids = [item["id"] for item in items]
    taken = _taken(session, conversation_id, ids)
    for n, item_id in enumerate(ids):
        if item_id in taken or item_id in ids[:n]:
            raise DuplicateItem(f"An item with id '{item_id}' is already in conversation '{conversation_id}'.",
                                param=f"items[{n}].id", code="duplicate_item")
    _append(session, conversation_id, items)


def append_turn(session: Session, conversation_id: str, response_id: str, output: Sequence[dict[str, Any]]) -> None:
    """What a response of the conversation adds once it ended: its input items (as stored with it; an
    ``item_reference`` as the item it names, which the API let its owner name), then its output items. A
    conversation deleted meanwhile gets nothing; an item already there (a client may send an item the
    conversation holds) is not added again."""
    if not take_turns(session, conversation_id):
        return
    inputs = list(session.execute(
        select(_input_items.c.item).where(_input_items.c.response_id == response_id).order_by(_input_items.c.position)
    ).scalars())
    references = [item["id"] for item in inputs if item.get("type") == ITEM_REFERENCE]
    named = find_stored_items(session, references, None) if references else {}
    items = [named.get(item["id"]) if item.get("type") == ITEM_REFERENCE else item for item in inputs]
    kept = [item for item in [*items, *output] if item is not None and item.get("id")]
    taken = _taken(session, conversation_id, [item["id"] for item in kept])
    fresh: dict[str, dict[str, Any]] = {}
    for item in kept:
        if item["id"] not in taken:
            fresh.setdefault(item["id"], dict(item))
    _append(session, conversation_id, list(fresh.values()))


def items_through(
    session: Session, conversation_id: str, through: int | None = None
) -> tuple[list[dict[str, Any]], int] | None:
    """The conversation's items, oldest first, up to position ``through`` (None: all it holds now), and
    the position they end at (``through``, or the last item's now; -1 for none). None if it is gone.

    A response in a conversation is given them before its input: read whole when it is accepted, then
    up to the position recorded then, by the worker and by later turns that continue it."""
    if session.execute(select(_conversations.c.id).where(_conversations.c.id == conversation_id)).first() is None:
        return None
    query = select(_items.c.position, _items.c.item).where(_items.c.conversation_id == conversation_id)
    if through is not None:
        query = query.where(_items.c.position <= through)
    rows = session.execute(query.order_by(_items.c.position)).all()
    end = through if through is not None else (rows[-1].position if rows else -1)
    return [row.item for row in rows], end


def item_bytes(session: Session, conversation_id: str) -> int:
    """The bytes of the conversation's items as stored (their JSON text), counted by the database."""
    size = func.length(_items.c.item.cast(Text))
    total = session.execute(select(func.coalesce(func.sum(size), 0)).where(_items.c.conversation_id == conversation_id))
    return int(total.scalar_one())


def take_turns(session: Session, conversation_id: str) -> bool:
    """Whether the conversation is there; if so, it is this transaction's until the commit.

    A write first: it takes SQLite's writer lock or PostgreSQL's row lock, so two appends to one
    conversation take turns instead of both reading the same last position, and a delete waits."""
    statement = (update(_conversations).where(_conversations.c.id == conversation_id)
                 .values(metadata=_conversations.c.metadata))
    return cast(CursorResult[Any], session.execute(statement)).rowcount == 1


def last_position(session: Session, conversation_id: str) -> int:
    """The position of the conversation's last item (-1: it holds none)."""
    last = session.execute(
        select(func.max(_items.c.position)).where(_items.c.conversation_id == conversation_id)
    ).scalar_one_or_none()
    return -1 if last is None else int(last)


def _taken(session: Session, conversation_id: str, ids: Sequence[str]) -> set[str]:
    return set(session.execute(
        select(_items.c.item_id).where(_items.c.conversation_id == conversation_id, _items.c.item_id.in_(list(ids)))
    ).scalars())


def _append(session: Session, conversation_id: str, items: Sequence[dict[str, Any]]) -> None:
    """After ``take_turns``: the conversation's row is this transaction's."""
    if not items:
        return
    recorded = session.execute(
        select(_conversations.c.next_position).where(_conversations.c.id == conversation_id)
    ).scalar_one_or_none()
    start = max(recorded or 0, last_position(session, conversation_id) + 1)
    session.execute(insert(_items), [
        {"conversation_id": conversation_id, "position": start + n, "item_id": item["id"], "item": item}
        for n, item in enumerate(items)
    ])
    session.execute(update(_conversations).where(_conversations.c.id == conversation_id)
                    .values(next_position=start + len(items)))


def list_items(
    session: Session, conversation_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
) -> tuple[list[dict[str, Any]], bool]:
    """One page of items after the item ``after`` in ``order``, and whether more follow (``page_items``)."""
    return page_items(session, _items, _items.c.conversation_id == conversation_id, after=after, limit=limit,
                      order=order, unknown_after=f"No item with id '{after}' in conversation '{conversation_id}'.")


def get_item(session: Session, conversation_id: str, item_id: str) -> dict[str, Any] | None:
    query = select(_items.c.item).where(_items.c.conversation_id == conversation_id, _items.c.item_id == item_id)
    item: dict[str, Any] | None = session.execute(query).scalar_one_or_none()
    return item


def delete_item(session: Session, conversation_id: str, item_id: str) -> bool:
    """Whether the item was there (and is now gone)."""
    statement = delete(_items).where(_items.c.conversation_id == conversation_id, _items.c.item_id == item_id)
    return cast(CursorResult[Any], session.execute(statement)).rowcount == 1
