"""responses.created_at indexed: the retention purge (``OSS_RESPONSES_RESPONSE_RETENTION_SECONDS``) takes
the oldest ended responses first, in batches, without reading the whole table each time

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_responses_created_at", "responses", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_responses_created_at", table_name="responses")
