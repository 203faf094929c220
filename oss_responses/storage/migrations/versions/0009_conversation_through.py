"""responses.conversation_through: a response in a conversation records how far the conversation went
when it was accepted, instead of storing a copy of the conversation's items with its request

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # NULL for every earlier row: those in a conversation carry its items in their stored request.
    op.add_column("responses", sa.Column("conversation_through", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("responses", "conversation_through")
