"""webhook_deliveries: the delivery log of webhook events (one row per event and endpoint)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)
STATES = ("pending", "retrying", "delivered", "failed")


def upgrade() -> None:
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("webhook_id", sa.String(), nullable=False),
        sa.Column("endpoint_url", sa.Text(), nullable=False),
        sa.Column("event_type", sa.String(), nullable=False),
        sa.Column("response_id", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("delivered_at", TIMESTAMP, nullable=True),
        sa.CheckConstraint(f"state IN {STATES!r}", name=op.f("ck_webhook_deliveries_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint(
            "webhook_id", "endpoint_url", name=op.f("uq_webhook_deliveries_webhook_id_endpoint_url")
        ),
    )
    op.create_index(op.f("ix_webhook_deliveries_response_id"), "webhook_deliveries", ["response_id"])
    op.create_index(op.f("ix_webhook_deliveries_state"), "webhook_deliveries", ["state"])


def downgrade() -> None:
    op.drop_index(op.f("ix_webhook_deliveries_state"), table_name="webhook_deliveries")
    op.drop_index(op.f("ix_webhook_deliveries_response_id"), table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
