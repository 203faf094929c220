"""responses and input_items

Revision ID: 0001
Revises:
Create Date: 2025-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)
STATUSES = ("queued", "in_progress", "completed", "incomplete", "failed", "cancelled")


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("background", sa.Boolean(), nullable=False),
        sa.Column("store", sa.Boolean(), nullable=False),
        sa.Column("previous_response_id", sa.String(), nullable=True),
        sa.Column("request", JSON, nullable=False),
        sa.Column("response", JSON, nullable=False),
        sa.Column("error", JSON, nullable=True),
        sa.Column("input_messages", JSON, nullable=False),
        sa.Column("output_messages", JSON, nullable=False),
        sa.Column("function_calls", JSON, nullable=False),
        sa.Column("state", JSON, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("completed_at", TIMESTAMP, nullable=True),
        sa.CheckConstraint(f"status IN {STATUSES!r}", name=op.f("ck_responses_status")),
        sa.ForeignKeyConstraint(
            ["previous_response_id"],
            ["responses.id"],
            name=op.f("fk_responses_previous_response_id_responses"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_responses")),
    )
    op.create_index(op.f("ix_responses_status"), "responses", ["status"])
    op.create_index(op.f("ix_responses_previous_response_id"), "responses", ["previous_response_id"])
    op.create_table(
        "input_items",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("response_id", sa.String(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.String(), nullable=False),
        sa.Column("item", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["response_id"], ["responses.id"], name=op.f("fk_input_items_response_id_responses"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_input_items")),
        sa.UniqueConstraint("response_id", "position", name=op.f("uq_input_items_response_id_position")),
    )


def downgrade() -> None:
    op.drop_table("input_items")
    op.drop_index(op.f("ix_responses_previous_response_id"), table_name="responses")
    op.drop_index(op.f("ix_responses_status"), table_name="responses")
    op.drop_table("responses")
