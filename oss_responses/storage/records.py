"""Plain values the data-access functions take and return (no ORM objects leave a session)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from oss_responses.statuses import TERMINAL_STATUSES, Status

Order = Literal["asc", "desc"]


def utcnow() -> datetime:
    return datetime.now(UTC)


def database_now(session: Session) -> datetime:
    """Now by the database's clock, for a cutoff compared with timestamps other hosts wrote: the reaper's
    lock and the webhook sweeper's elect any worker, and one whose clock ran 2 hours fast deleted every
    response that ended in the last 2 hours of a 1-hour retention, and sent again every task queued a
    minute before it (the clock probe). PostgreSQL's ``now()`` is the same clock whoever asks; a SQLite
    file is shared only by processes on its own host, whose clock this is."""
    if session.get_bind().dialect.name == "postgresql":
        return session.execute(select(func.now())).scalar_one().astimezone(UTC)
    return utcnow()


# The key of a row's ``state`` holding its turn's sealing plan (``ResponseTranslator.sealing_plan``: which
# stored messages each reasoning item seals), by which a retrieve with ``include`` seals (``api/sealed.py``).
# Absent from rows stored before it was kept, and from turns with no reasoning item.
SEALING_PLAN = "sealing_plan"


@dataclass(frozen=True, kw_only=True)
class ResponseRecord:
    """A row of ``responses``. Build one (status ``queued``) to insert; get one back from reads."""

    id: str
    model: str
    status: Status
    background: bool
    store: bool
    request: dict[str, Any]
    response: dict[str, Any]
    previous_response_id: str | None = None
    error: dict[str, Any] | None = None
    input_messages: list[dict[str, Any]] = field(default_factory=list)
    output_messages: list[dict[str, Any]] = field(default_factory=list)
    function_calls: dict[str, str] = field(default_factory=dict)
    state: dict[str, Any] | None = None
    # The request's MCP credentials, sealed (sealing.seal_secrets): never in clear in SQL or Redis.
    sealed_secrets: str | None = None
    owner: str | None = None  # the API key's owner (keys mode); None in open mode
    # In a conversation: the position of its last item when this response was accepted (-1: empty)
    conversation_through: int | None = None
    conversation_id: str | None = None  # the conversation it runs in (locked while it runs)
    # The last sequence number a run left for a takeover had numbered: its stream held at most that far
    stream_high_water: int | None = None
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime | None = None  # set to created_at on insert
    completed_at: datetime | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True, kw_only=True)
class ApiKeyRecord:
    """A row of ``api_keys``: what a key may do, never its secret (only a hash of it is stored)."""

    id: str
    owner: str
    models: list[str] | None  # None: every served model
    max_background: int | None  # None: the settings' default
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None
