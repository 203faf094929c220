"""JSON, not JSONB, on PostgreSQL: documents may hold a NUL character (JSONB refuses \\u0000)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = {
    "responses": ("request", "response", "error", "input_messages", "output_messages", "function_calls", "state"),
    "input_items": ("item",),
}


def _retype(to: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite's JSON is text already
    type_ = postgresql.JSON(none_as_null=True) if to == "json" else postgresql.JSONB(none_as_null=True)
    for table, columns in COLUMNS.items():
        for column in columns:
            op.alter_column(table, column, type_=type_, postgresql_using=f"{column}::{to}")


def upgrade() -> None:
    _retype("json")


def downgrade() -> None:
    _retype("jsonb")  # fails on a document holding \u0000, which JSONB cannot keep
