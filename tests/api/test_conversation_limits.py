"""A conversation holds at most ``max_conversation_bytes`` of items for more to be added to it."""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI
from sqlalchemy import func, select
from support import MODEL
from support.api_server import ApiServer

from oss_responses.config import Settings
from oss_responses.storage import ResponseRow

LIMIT = 4_000


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"max_conversation_bytes": LIMIT})


def _message(text: str) -> dict[str, str]:
    return {"type": "message", "role": "user", "content": text}


def test_add_items_within_conversation_bytes_is_accepted(client: OpenAI) -> None:
    conversation = client.conversations.create()
    added = client.conversations.items.create(conversation.id, items=[_message("x" * 1_000)] * 3)
    assert len(added.data) == 3


def test_add_items_past_conversation_bytes_is_400_and_adds_nothing(client: OpenAI) -> None:
    """One owner grew a conversation to 280 MB, 20 items at a time; one count of its tokens held 3.5 GB."""
    conversation = client.conversations.create(items=[_message("x" * 3_000)])
    with pytest.raises(openai.BadRequestError) as refused:
        client.conversations.items.create(conversation.id, items=[_message("y" * 1_500)])
    assert refused.value.body["code"] == "conversation_too_large" and refused.value.body["param"] == "items"
    assert len(client.conversations.items.list(conversation.id).data) == 1


def test_create_response_in_full_conversation_is_400_and_stores_nothing(client: OpenAI, api: ApiServer) -> None:
    conversation = client.conversations.create(items=[_message("x" * 3_500)])
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, conversation=conversation.id, input="y" * 1_000, background=True)
    assert refused.value.body["code"] == "conversation_too_large" and refused.value.body["param"] == "conversation"
    with api.db.session() as session:
        assert session.scalar(select(func.count()).select_from(ResponseRow)) == 0


def test_create_conversation_with_items_past_conversation_bytes_is_400(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.conversations.create(items=[_message("x" * 1_500)] * 3)
    assert refused.value.body["code"] == "conversation_too_large"
