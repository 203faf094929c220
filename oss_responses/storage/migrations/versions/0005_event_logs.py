"""event_logs: a finished response's event log, compressed, moved out of Redis

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "event_logs",
        sa.Column("response_id", sa.String(), nullable=False),
        sa.Column("first_sequence_number", sa.Integer(), nullable=False),
        sa.Column("event_count", sa.Integer(), nullable=False),
        sa.Column("frames", sa.LargeBinary(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["response_id"], ["responses.id"], name="fk_event_logs_response_id_responses", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("response_id", name="pk_event_logs"),
    )
    op.create_index("ix_event_logs_expires_at", "event_logs", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_event_logs_expires_at", table_name="event_logs")
    op.drop_table("event_logs")
