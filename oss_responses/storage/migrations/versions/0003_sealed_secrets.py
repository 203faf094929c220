"""responses.sealed_secrets: a request's MCP credentials, sealed, for whichever worker runs it

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("responses", sa.Column("sealed_secrets", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("responses", "sealed_secrets")
