"""conversations.next_position: an item's position is never reused once its item is deleted, so a
response that recorded how far its conversation went never takes in an item added later in its place

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # NULL for every earlier row: the next item goes after the last one, as before.
    op.add_column("conversations", sa.Column("next_position", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("conversations", "next_position")
