"""responses.conversation_id: the conversation a response runs in, indexed, so that an accept can see
whether another response of that conversation is still queued or in progress (``conversation_locked``)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("responses", sa.Column("conversation_id", sa.String(), nullable=True))
    op.create_index("ix_responses_conversation_id", "responses", ["conversation_id"])
    # Only a response still running can hold its conversation; ended rows keep NULL (they are never
    # counted). Read in Python: JSON paths differ between SQLite and PostgreSQL.
    responses = sa.table(
        "responses", sa.column("id", sa.String()), sa.column("status", sa.String()),
        sa.column("request", sa.JSON()), sa.column("conversation_id", sa.String()),
    )
    bind = op.get_bind()
    running = bind.execute(
        sa.select(responses.c.id, responses.c.request).where(responses.c.status.in_(("queued", "in_progress")))
    ).all()
    for response_id, request in running:
        conversation = _conversation_of(request)
        if conversation is not None:
            bind.execute(
                responses.update().where(responses.c.id == response_id).values(conversation_id=conversation)
            )


def _conversation_of(request: Any) -> str | None:
    if isinstance(request, str):
        request = json.loads(request)
    conversation = request.get("conversation") if isinstance(request, dict) else None
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    return conversation if isinstance(conversation, str) else None


def downgrade() -> None:
    op.drop_index("ix_responses_conversation_id", table_name="responses")
    op.drop_column("responses", "conversation_id")
