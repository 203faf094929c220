"""Stored items: a response's input items paged as ``GET /v1/responses/{id}/input_items`` does, and any
stored item found by id (``item_reference``)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, and_, select
from sqlalchemy.orm import Session

from oss_responses.storage.models import InputItemRow, OutputItemRow, ResponseRow
from oss_responses.storage.paging import page_items
from oss_responses.storage.records import Order

ITEM_REFERENCE = "item_reference"

_input_items = cast(Table, InputItemRow.__table__)
_output_items = OutputItemRow.__table__
_responses = ResponseRow.__table__


def list_input_items(
    session: Session, response_id: str, *, after: str | None = None, limit: int = 20, order: Order = "desc"
) -> tuple[list[dict[str, Any]], bool]:
    """One page of items after the item ``after`` in ``order``, and whether more follow (``page_items``)."""
    return page_items(session, _input_items, _input_items.c.response_id == response_id, after=after, limit=limit,
                      order=order, unknown_after=f"No input item with id '{after}' in response '{response_id}'.")


def find_input_items(
    session: Session, response_ids: Sequence[str], item_ids: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """item id → stored input item, among the input items of ``response_ids``."""
    if not response_ids or not item_ids:
        return {}
    query = select(InputItemRow.item_id, InputItemRow.item).where(
        InputItemRow.response_id.in_(list(response_ids)), InputItemRow.item_id.in_(list(item_ids))
    )
    return {item_id: item for item_id, item in session.execute(query)}


def find_stored_items(session: Session, item_ids: Sequence[str], owner: str | None) -> dict[str, dict[str, Any]]:
    """item id → the item, among the output items of ended responses and the input items of any response
    that is stored and, unless ``owner`` is None (open mode), ``owner``'s. An input item id that several
    responses' inputs share (clients may name their own) is the newest one's; a stored ``item_reference``
    is not an item."""
    if not item_ids:
        return {}
    visible: ColumnElement[bool] = _responses.c.store.is_(True)
    if owner is not None:
        visible = and_(visible, _responses.c.owner == owner)
    inputs = (
        select(_input_items.c.item_id, _input_items.c.item)
        .join(_responses, _responses.c.id == _input_items.c.response_id)
        .where(_input_items.c.item_id.in_(list(item_ids)), visible)
        .order_by(_input_items.c.id)
    )
    outputs = (
        select(_output_items.c.item_id, _output_items.c.item)
        .join(_responses, _responses.c.id == _output_items.c.response_id)
        .where(_output_items.c.item_id.in_(list(item_ids)), visible)
    )
    # A stored reference stands for another item, never for itself (a later response may name the item too).
    found = {item_id: item for item_id, item in session.execute(inputs) if item.get("type") != ITEM_REFERENCE}
    found.update({item_id: item for item_id, item in session.execute(outputs)})
    return found


def find_referenced_items(
    session: Session, item_ids: Sequence[str], chain_ids: Sequence[str], owner: str | None, known: Collection[str] = ()
) -> dict[str, dict[str, Any]]:
    """What ``item_reference`` inputs name, in one transaction: the chain's input items first, then, for
    ids neither those nor ``known`` (the chain's own items) hold, any stored item ``owner`` may see."""
    found = find_input_items(session, chain_ids, item_ids)
    rest = [item_id for item_id in item_ids if item_id not in found and item_id not in known]
    return found | find_stored_items(session, rest, owner)
