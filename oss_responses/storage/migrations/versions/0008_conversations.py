"""conversations and conversation_items: the Conversations API's objects (``/v1/conversations``)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON(none_as_null=True)  # json, not jsonb (0002): a NUL in an item is kept as it is


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=True),
        sa.Column("metadata", JSON_TYPE, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
    )
    op.create_index(op.f("ix_conversations_owner"), "conversations", ["owner"])
    op.create_table(
        "conversation_items",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.String(), nullable=False),
        sa.Column("item", JSON_TYPE, nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"], name=op.f("fk_conversation_items_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversation_items")),
        sa.UniqueConstraint("conversation_id", "position", name=op.f("uq_conversation_items_conversation_id_position")),
        sa.UniqueConstraint("conversation_id", "item_id", name=op.f("uq_conversation_items_conversation_id_item_id")),
    )


def downgrade() -> None:
    op.drop_table("conversation_items")
    op.drop_index(op.f("ix_conversations_owner"), table_name="conversations")
    op.drop_table("conversations")
