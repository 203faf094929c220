"""Data access for ``responses``: sync functions taking a ``Session`` inside the caller's transaction.

The API calls them through ``AsyncDatabase.run`` (``AsyncSession.run_sync``), workers through
``Database.run``. Status changes are compare-and-set (:func:`transition`), so of two writers racing to
end a response (cancel vs. completion, two workers) exactly one wins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import Any, cast

from sqlalchemy import (
    CTE,
    CursorResult,
    Delete,
    RowMapping,
    Select,
    Table,
    Update,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.orm import Session

from oss_responses.statuses import ACTIVE_STATUSES, TERMINAL_STATUSES, Status
from oss_responses.storage.api_keys import lock_owner_keys
from oss_responses.storage.conversations import append_turn, last_position, take_turns
from oss_responses.storage.models import InputItemRow, OutputItemRow, ResponseRow
from oss_responses.storage.records import ResponseRecord, database_now, utcnow

_responses = cast(Table, ResponseRow.__table__)
_input_items = cast(Table, InputItemRow.__table__)
_output_items = cast(Table, OutputItemRow.__table__)
_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(ResponseRecord))
_UPDATABLE = frozenset(_RECORD_FIELDS) - {"id", "status", "created_at"}
MAX_CHAIN_DEPTH = 10_000  # a guard only: ids are fresh, so a chain cannot loop


def insert_response(
    session: Session, record: ResponseRecord, input_items: Sequence[Mapping[str, Any]] = ()
) -> None:
    """Insert a response and its input items (each a dict with an ``id``), in their order."""
    # Not dataclasses.asdict: it deep-copies the request and Response documents (a tenth of the API's
    # CPU per accept), and the insert only reads them.
    values = {name: getattr(record, name) for name in _RECORD_FIELDS}
    values["updated_at"] = record.updated_at or record.created_at
    # Parameters beside the statement, not in it (``.values(values)``): the statement is then the same
    # every time, compiled once, and SQLAlchemy does not walk the documents to build its cache key.
    session.execute(insert(_responses), [values])
    if input_items:
        session.execute(
            insert(_input_items),
            [
                {"response_id": record.id, "position": position, "item_id": item["id"], "item": dict(item)}
                for position, item in enumerate(input_items)
            ],
        )


class InFlightLimitReached(Exception):
    """The owner already has its most responses (``background``: background responses) in flight; nothing
    was inserted."""

    def __init__(self, owner: str, limit: int, *, background: bool) -> None:
        super().__init__(f"{owner} has {limit} {'background ' if background else ''}responses in flight")
        self.owner = owner
        self.limit = limit
        self.background = background


class ConversationLocked(Exception):
    """Another response of the conversation is queued or in progress, or the conversation changed since
    the response was planned on it; nothing was inserted."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"conversation {conversation_id} is busy")
        self.conversation_id = conversation_id


def insert_accepted(
    session: Session,
    record: ResponseRecord,
    input_items: Sequence[Mapping[str, Any]],
    *,
    background_limit: int | None = None,
    in_flight_limit: int | None = None,
) -> None:
    """Insert a response the API accepted, unless its conversation is taken (:class:`ConversationLocked`)
    or its owner has too many in flight (:class:`InFlightLimitReached`): more than ``in_flight_limit``
    responses of any kind, or, a background one, more than ``background_limit`` background ones; the
    caller's transaction then rolls the insert back.

    A conversation runs one response at a time, as OpenAI's does: a second one would be planned without
    the first one's output, and their turns would join the conversation in whichever order they end.
    The response was planned on the conversation's items through ``conversation_through``; an item added
    since (a turn that just ended, an item added by hand) means it must be planned again.

    Inserted first, then counted: the conversation's row is written first (SQLite's one write lock, a row
    lock on PostgreSQL), and the owner's key rows are locked on PostgreSQL, so two concurrent accepts
    cannot both count the other one out.
    """
    conversation = record.conversation_id
    if conversation is not None and take_turns(session, conversation):  # a deleted one: the worker fails it
        through = record.conversation_through
        if through is not None and last_position(session, conversation) != through:
            raise ConversationLocked(conversation)
    background = background_limit if record.background else None
    owner = record.owner
    if background is not None or in_flight_limit is not None:
        if owner is None:
            raise ValueError("only an owned response has an in-flight limit")
        lock_owner_keys(session, owner)
    insert_response(session, record, input_items)
    if conversation is not None and count_running_in_conversation(session, conversation) > 1:
        raise ConversationLocked(conversation)
    if owner is None:
        return
    every, of_background = count_in_flight(session, owner)
    if in_flight_limit is not None and every > in_flight_limit:
        raise InFlightLimitReached(owner, in_flight_limit, background=False)
    if background is not None and of_background > background:
        raise InFlightLimitReached(owner, background, background=True)


def count_running_in_conversation(session: Session, conversation_id: str) -> int:
    """The conversation's responses that are queued or in progress."""
    query = select(func.count()).select_from(_responses).where(
        _responses.c.conversation_id == conversation_id, _responses.c.status.in_(ACTIVE_STATUSES)
    )
    return int(session.execute(query).scalar_one())


def count_in_flight(session: Session, owner: str) -> tuple[int, int]:
    """The owner's responses that are queued or in progress: all of them, and the background ones (one read)."""
    query = select(func.count(), func.count().filter(_responses.c.background.is_(True))).select_from(_responses).where(
        _responses.c.owner == owner, _responses.c.status.in_(ACTIVE_STATUSES)
    )
    every, of_background = session.execute(query).one()
    return int(every), int(of_background)


# The statements run once or twice per response are built once, their values passed beside them at
# execution (bound parameters named ``b_*``, apart from the columns an UPDATE sets). Built per call, the
# chain's recursive CTE cost ~0.65 ms of CPU to construct, more than running it on SQLite (~0.13 ms),
# and an UPDATE built with its documents in ``.values()`` is walked for its cache key every time.
@cache
def _response_by_id() -> Select[Any]:
    return select(_responses).where(_responses.c.id == bindparam("b_id"))


@cache
def _chain_of(owned: bool) -> Select[Any]:
    start = select(_responses.c.id, _responses.c.previous_response_id, literal(0).label("depth"))
    start = start.where(_responses.c.id == bindparam("b_id"))
    if owned:
        start = start.where(_responses.c.owner == bindparam("b_owner"))
    chain: CTE = start.cte("chain", recursive=True)
    parent = _responses.alias("parent")
    chain = chain.union_all(
        select(parent.c.id, parent.c.previous_response_id, (chain.c.depth + 1).label("depth"))
        .join(chain, parent.c.id == chain.c.previous_response_id)
        .where(chain.c.depth < MAX_CHAIN_DEPTH)
    )
    return select(_responses).join(chain, chain.c.id == _responses.c.id).order_by(chain.c.depth.desc())


@cache
def _status_change() -> Update:
    # No .values(): the SET clause is the execution parameters' columns (cached per set of names).
    return update(_responses).where(
        _responses.c.id == bindparam("b_id"), _responses.c.status.in_(bindparam("b_from", expanding=True))
    )


@cache
def _delete_by_id() -> Delete:
    return delete(_responses).where(_responses.c.id == bindparam("b_id"))


def get_response(session: Session, response_id: str) -> ResponseRecord | None:
    row = session.execute(_response_by_id(), {"b_id": response_id}).mappings().first()
    return _record(row) if row is not None else None


def get_owned_response(session: Session, response_id: str, owner: str | None) -> ResponseRecord | None:
    """The response if ``owner``'s (None: anyone's): another owner's row is compared in the database, not
    fetched and parsed. (SQLite still reads the row up to its ``owner`` column, past a large request's
    overflow pages: a 404 for another owner's 8 MB response took 27-35 ms against 5-11 ms for an unknown id,
    38-46 ms before.)"""
    if owner is None:
        return get_response(session, response_id)
    row = session.execute(_owned_response_by_id(), {"b_id": response_id, "b_owner": owner}).mappings().first()
    return _record(row) if row is not None else None


@cache
def _owned_response_by_id() -> Select[Any]:
    return _response_by_id().where(_responses.c.owner == bindparam("b_owner"))


def get_chain(session: Session, response_id: str, owner: str | None = None) -> list[ResponseRecord]:
    """The response and its ancestors by ``previous_response_id``, oldest first ([] if unknown, or, with
    ``owner``, not that owner's: its chain is not walked, so that another owner's id takes as long to refuse as
    an unknown one, not the time its turns take to load)."""
    values = {"b_id": response_id} if owner is None else {"b_id": response_id, "b_owner": owner}
    return [_record(row) for row in session.execute(_chain_of(owner is not None), values).mappings()]


def transition(
    session: Session, /, response_id: str, *, from_statuses: Iterable[Status], to_status: Status, **fields: Any
) -> bool:
    """Set ``status`` (and ``fields``) only if the status is one of ``from_statuses``; True if it was."""
    unknown = set(fields) - _UPDATABLE
    if unknown:
        raise TypeError(f"not updatable response fields: {sorted(unknown)}")
    values = {"b_id": response_id, "b_from": list(from_statuses), "status": to_status, "updated_at": utcnow(), **fields}
    return cast(CursorResult[Any], session.execute(_status_change(), values)).rowcount == 1


def warm_statements(session: Session) -> None:
    """Run a response's start-up statements against no row: a process compiles them (and opens its
    first connection) while it starts instead of during its first response (~3 ms measured)."""
    get_chain(session, "")
    get_chain(session, "", "")  # the API's, by owner
    transition(session, "", from_statuses=("queued",), to_status="in_progress")


def cancel_queued(session: Session, response_id: str, response: Mapping[str, Any]) -> bool:
    """Cancel a response that is still queued, its stored Response (``response``) marked cancelled;
    False if it had left the queue (a worker took it, or it ended). The API's cancel and a worker
    that finds the cancel flag before starting race here: one wins."""
    return transition(
        session, response_id, from_statuses=("queued",), to_status="cancelled",
        response={**response, "status": "cancelled"}, completed_at=utcnow(),
    )


# A response's turn joins its conversation when it ended with an answer, whole or cut short; a failed or
# cancelled one adds nothing (its client would send its input again, and it would be there twice).
TURN_TAKEN = frozenset({"completed", "incomplete"})


def save_turn(
    session: Session,
    response_id: str,
    *,
    store: bool = True,
    status: Status,
    response: dict[str, Any],
    output_messages: list[dict[str, Any]],
    function_calls: dict[str, str] | None = None,
    input_messages: list[dict[str, Any]] | None = None,
    error: dict[str, Any] | None = None,
    state: dict[str, Any] | None = None,
    completed_at: datetime | None = None,
    from_statuses: Iterable[Status] = ACTIVE_STATUSES,
) -> bool:
    """Store the end of a turn, unless the response already ended, or is not in ``from_statuses`` (then
    nothing changes: False).

    ``store=False``: the response is deleted once ended (its row only carried it while it ran;
    nobody may read it later), in the same transaction.
    """
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"save_turn needs a terminal status, not {status!r}")
    fields: dict[str, Any] = {
        "response": response,
        "output_messages": output_messages,
        "error": error,
        "state": state,
        "completed_at": completed_at or utcnow(),
    }
    if function_calls is not None:
        fields["function_calls"] = function_calls
    if input_messages is not None:
        fields["input_messages"] = input_messages
    ended = transition(session, response_id, from_statuses=from_statuses, to_status=status, **fields)
    conversation = response.get("conversation")
    if ended and conversation and status in TURN_TAKEN:  # before a store=false response's input items go
        append_turn(session, conversation["id"], response_id, response.get("output") or [])
    if ended and not store:
        delete_response(session, response_id)
    elif ended:
        _index_output_items(session, response_id, response.get("output") or [])
    return ended


def _index_output_items(session: Session, response_id: str, output: Sequence[Mapping[str, Any]]) -> None:
    rows = [
        {"item_id": item["id"], "response_id": response_id, "item": dict(item)} for item in output if item.get("id")
    ]
    if rows:
        session.execute(insert(_output_items), rows)


def delete_response(session: Session, response_id: str) -> bool:
    """Delete a response and its input items; later turns keep their rows (their link becomes NULL)."""
    return cast(CursorResult[Any], session.execute(_delete_by_id(), {"b_id": response_id})).rowcount == 1


def active_among(session: Session, response_ids: Sequence[str]) -> set[str]:
    """Those of ``response_ids`` still queued or in progress (none asked: no query)."""
    if not response_ids:
        return set()
    query = select(_responses.c.id).where(_responses.c.id.in_(response_ids), _responses.c.status.in_(ACTIVE_STATUSES))
    return set(session.execute(query).scalars())


def list_in_progress_ids(session: Session) -> list[str]:
    query = select(_responses.c.id).where(_responses.c.status == "in_progress").order_by(_responses.c.created_at)
    return list(session.execute(query).scalars())


def list_stale_queued(session: Session, older_than: timedelta) -> list[tuple[str, str]]:
    """(id, model) of the responses still queued that were accepted over ``older_than`` ago, by the
    database's clock (``database_now``)."""
    created_before = database_now(session) - older_than
    query = (
        select(_responses.c.id, _responses.c.model)
        .where(_responses.c.status == "queued", _responses.c.created_at < created_before)
        .order_by(_responses.c.created_at)
    )
    return [(row.id, row.model) for row in session.execute(query)]


def _record(row: RowMapping) -> ResponseRecord:
    return ResponseRecord(**{name: row[name] for name in _RECORD_FIELDS})
