"""responses.stream_high_water: the last sequence number a run left for a takeover had numbered, so that a
takeover that finds the stream ending before it (Redis restored from an earlier state) marks the span it
writes anew (eventlog/rewinds.py)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # NULL for every earlier row: no run of it was left for a takeover with this column.
    op.add_column("responses", sa.Column("stream_high_water", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("responses", "stream_high_water")
