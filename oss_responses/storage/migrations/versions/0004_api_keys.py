"""api_keys (hashed secrets, per-key models and background limit) and responses.owner

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("secret_hash", sa.String(), nullable=False),
        sa.Column("models", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("max_background", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
    )
    op.create_index("ix_api_keys_owner", "api_keys", ["owner"])
    op.create_index("ix_api_keys_secret_hash", "api_keys", ["secret_hash"], unique=True)
    # Plain ALTERs (no batch copy on SQLite: recreating ``responses`` would cascade to its input items).
    op.add_column("responses", sa.Column("owner", sa.String(), nullable=True))
    op.create_index("ix_responses_owner", "responses", ["owner"])


def downgrade() -> None:
    op.drop_index("ix_responses_owner", table_name="responses")
    op.drop_column("responses", "owner")
    op.drop_index("ix_api_keys_secret_hash", table_name="api_keys")
    op.drop_index("ix_api_keys_owner", table_name="api_keys")
    op.drop_table("api_keys")
