"""The SQL schema: SQLAlchemy 2.0 typed models of ``responses``, ``input_items``, ``event_logs``, ``api_keys``
and ``conversations``.

Portable between SQLite and PostgreSQL: JSON columns are JSON on both (not JSONB on PostgreSQL:
JSONB refuses ``\u0000``, and a model's output or a client's input may hold a NUL character; nothing
queries inside these documents), and timestamps are timezone-aware UTC datetimes on both (SQLite stores
them naive; :class:`UTCDateTime` restores the zone).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from oss_responses.statuses import STATUSES

WEBHOOK_STATES = ("pending", "retrying", "delivered", "failed")

# ``none_as_null``: Python None is SQL NULL (not the JSON literal ``null``), so ``IS NULL`` works.
JSONType = JSON(none_as_null=True)
# SQLite's INTEGER PRIMARY KEY is the rowid alias; BIGINT there would not autoincrement.
BigIntId = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Aware datetimes in, aware UTC datetimes out, on every backend."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass a timezone-aware one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_name)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s_%(column_1_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class ResponseRow(Base):
    """One response: its request, its Response object, and the harmony messages of its turn."""

    __tablename__ = "responses"
    __table_args__ = (CheckConstraint(f"status IN {STATUSES!r}", name="status"),)

    id: Mapped[str] = mapped_column(String, primary_key=True)
    model: Mapped[str] = mapped_column(String)
    status: Mapped[str] = mapped_column(String, index=True)
    background: Mapped[bool] = mapped_column(Boolean)
    store: Mapped[bool] = mapped_column(Boolean)
    previous_response_id: Mapped[str | None] = mapped_column(
        String, ForeignKey("responses.id", ondelete="SET NULL"), index=True
    )
    request: Mapped[dict[str, Any]] = mapped_column(JSONType)
    response: Mapped[dict[str, Any]] = mapped_column(JSONType)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    input_messages: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)
    output_messages: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)
    function_calls: Mapped[dict[str, str]] = mapped_column(JSONType)
    # What the worker keeps of the turn beside its messages: its sealing plan (records.SEALING_PLAN), and the
    # prompt's messages when vLLM's enable_response_messages asked for them.
    state: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    sealed_secrets: Mapped[str | None] = mapped_column(Text)
    # The owner of the API key that created it; NULL for responses created in open mode.
    owner: Mapped[str | None] = mapped_column(String, index=True)
    # In a conversation (the request's ``conversation``): its items up to this position come before the
    # input. NULL otherwise, and for rows older than migration 0009, whose request holds those items.
    conversation_through: Mapped[int | None] = mapped_column(Integer)
    # The conversation it runs in: while it is queued or in progress, no other response may start there.
    # NULL for rows that ended before migration 0010 (only running ones were filled in).
    conversation_id: Mapped[str | None] = mapped_column(String, index=True)
    # The last sequence number a run left for a takeover had numbered (workers/handoff.py: leave_for_takeover)
    stream_high_water: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)  # the retention purge's order
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class InputItemRow(Base):
    """One input item of a response, as ``GET /v1/responses/{id}/input_items`` returns it."""

    __tablename__ = "input_items"
    # The unique index (response_id, position) also serves lookups by response_id.
    __table_args__ = (UniqueConstraint("response_id", "position"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    response_id: Mapped[str] = mapped_column(String, ForeignKey("responses.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    # Indexed for item_reference (``storage/items.py``); ids given by clients need not be unique.
    item_id: Mapped[str] = mapped_column(String, index=True)
    item: Mapped[dict[str, Any]] = mapped_column(JSONType)


class OutputItemRow(Base):
    """One output item of an ended stored response, by id, for ``item_reference`` input items: a client
    that keeps the conversation (the Vercel AI SDK) names earlier items by id, with no
    ``previous_response_id``. The Response JSON holds the same items; this is their index."""

    __tablename__ = "output_items"

    item_id: Mapped[str] = mapped_column(String, primary_key=True)
    response_id: Mapped[str] = mapped_column(
        String, ForeignKey("responses.id", ondelete="CASCADE"), index=True
    )
    item: Mapped[dict[str, Any]] = mapped_column(JSONType)


class ConversationRow(Base):
    """A conversation (``/v1/conversations``): its items are ``conversation_items``."""

    __tablename__ = "conversations"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    # The owner of the API key that created it; NULL for conversations created in open mode.
    owner: Mapped[str | None] = mapped_column(String, index=True)
    # ``metadata`` is taken by the declarative base.
    metadata_: Mapped[dict[str, str]] = mapped_column("metadata", JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The position the next item takes: positions are never reused, so a response that recorded how far
    # the conversation went (``responses.conversation_through``) never takes in an item added after it
    # in the place of one deleted since. NULL (rows from before migration 0011): after the last item.
    next_position: Mapped[int | None] = mapped_column(Integer, nullable=True)


class ConversationItemRow(Base):
    """One item of a conversation, in the order it was added (``position``), as its list endpoint returns it."""

    __tablename__ = "conversation_items"
    # The unique index (conversation_id, position) serves the pages; (conversation_id, item_id) the item's
    # own routes, and keeps an id once per conversation.
    __table_args__ = (UniqueConstraint("conversation_id", "position"), UniqueConstraint("conversation_id", "item_id"))

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(String, ForeignKey("conversations.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    item_id: Mapped[str] = mapped_column(String)
    item: Mapped[dict[str, Any]] = mapped_column(JSONType)


class EventLogRow(Base):
    """A finished response's event log, moved out of Redis (``storage/event_logs.py``): its SSE frames,
    byte for byte, zlib-compressed, for ``GET ?stream=true`` until ``expires_at`` (the event TTL)."""

    __tablename__ = "event_logs"

    response_id: Mapped[str] = mapped_column(String, ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True)
    first_sequence_number: Mapped[int] = mapped_column(Integer)
    event_count: Mapped[int] = mapped_column(Integer)
    # zlib of: event_count uint32 frame lengths (little-endian), then the frames concatenated.
    frames: Mapped[bytes] = mapped_column(LargeBinary)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class WebhookDeliveryRow(Base):
    """One webhook event to one endpoint: the delivery log operators read (``python -m oss_responses.webhooks``).

    ``state``: ``pending`` (queued, not tried yet), ``retrying`` (an attempt failed; another is scheduled),
    ``delivered`` (an attempt got a 2xx), ``failed`` (given up after ``webhook_max_attempts``).
    """

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "endpoint_url"),
        CheckConstraint(f"state IN {WEBHOOK_STATES!r}", name="state"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    webhook_id: Mapped[str] = mapped_column(String)  # the event id: the same in every attempt
    endpoint_url: Mapped[str] = mapped_column(Text)
    event_type: Mapped[str] = mapped_column(String)
    response_id: Mapped[str] = mapped_column(String, index=True)  # no foreign key: the log outlives a DELETE
    state: Mapped[str] = mapped_column(String, index=True)
    attempts: Mapped[int] = mapped_column(Integer)
    last_status: Mapped[int | None] = mapped_column(Integer)  # the endpoint's HTTP status; None: no answer
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)  # the retention purge's order
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ApiKeyRow(Base):
    """An API key (keys mode): only a hash of its secret is kept; the secret is shown once, at creation."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String, primary_key=True)  # public: "key_..."
    owner: Mapped[str] = mapped_column(String, index=True)
    secret_hash: Mapped[str] = mapped_column(String, index=True, unique=True)  # sha256 hex of the secret
    models: Mapped[list[str] | None] = mapped_column(JSONType)  # NULL: every served model
    max_background: Mapped[int | None] = mapped_column(Integer)  # NULL: the settings' default
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
