"""Items in order, a page at a time: a response's input items and a conversation's items are both lists
that OpenAI pages by item id (``after``), ``limit`` and ``order``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Table, func, select
from sqlalchemy.orm import Session

from oss_responses.errors import BadRequest
from oss_responses.storage.records import Order


def page_items(
    session: Session, table: Table, owned_by: ColumnElement[bool], *, after: str | None, limit: int, order: Order,
    unknown_after: str,
) -> tuple[list[dict[str, Any]], bool]:
    """One page of ``table``'s items (its ``item`` column, in ``position`` order) where ``owned_by``, after
    the item ``after``, and whether more follow. An ``after`` that is not among them is a ``BadRequest``
    on ``param="after"`` saying ``unknown_after``."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    position = table.c.position
    query = select(table.c.item).where(owned_by)
    if after is not None:
        # An id held twice (input stored before such input was refused): past its last copy, or its first going
        # back, so that paging ends (the first copy's position gave the same page again and again).
        nearest = func.max(position) if order == "asc" else func.min(position)
        cursor = session.execute(select(nearest).where(owned_by, table.c.item_id == after)).scalar()
        if cursor is None:
            raise BadRequest(unknown_after, param="after")
        query = query.where(position > cursor if order == "asc" else position < cursor)
    query = query.order_by(position.asc() if order == "asc" else position.desc()).limit(limit + 1)
    items = list(session.execute(query).scalars())
    return items[:limit], len(items) > limit
