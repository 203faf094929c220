"""output_items: ended stored responses' output items by id, and input items indexed by id, so that an
``item_reference`` names any stored item its owner may see (not only the chain's)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON(none_as_null=True)  # json, not jsonb (0002): a NUL in an item is kept as it is
TERMINAL = ("completed", "incomplete", "failed", "cancelled")
BATCH = 500


def upgrade() -> None:
    op.create_table(
        "output_items",
        sa.Column("item_id", sa.String(), nullable=False),
        sa.Column("response_id", sa.String(), nullable=False),
        sa.Column("item", JSON_TYPE, nullable=False),
        sa.ForeignKeyConstraint(
            ["response_id"], ["responses.id"], name=op.f("fk_output_items_response_id_responses"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("item_id", name=op.f("pk_output_items")),
    )
    op.create_index(op.f("ix_output_items_response_id"), "output_items", ["response_id"])
    op.create_index(op.f("ix_input_items_item_id"), "input_items", ["item_id"])
    _index_ended_responses()


def _index_ended_responses() -> None:
    """The output items of the responses that ended before this migration, as a worker now saves them."""
    responses = sa.table("responses", sa.column("id", sa.String()), sa.column("status", sa.String()),
                         sa.column("store", sa.Boolean()), sa.column("response", JSON_TYPE))
    output_items = sa.table("output_items", sa.column("item_id", sa.String()),
                            sa.column("response_id", sa.String()), sa.column("item", JSON_TYPE))
    connection = op.get_bind()
    query = sa.select(responses.c.id, responses.c.response).where(
        responses.c.store.is_(True), responses.c.status.in_(TERMINAL)
    )
    rows = connection.execute(query.execution_options(yield_per=BATCH))
    for batch in rows.partitions(BATCH):
        items = [
            {"item_id": item["id"], "response_id": response_id, "item": item}
            for response_id, response in batch
            for item in (response or {}).get("output") or []
            if isinstance(item, dict) and item.get("id")
        ]
        if items:
            connection.execute(output_items.insert(), items)


def downgrade() -> None:
    op.drop_index(op.f("ix_input_items_item_id"), table_name="input_items")
    op.drop_index(op.f("ix_output_items_response_id"), table_name="output_items")
    op.drop_table("output_items")
