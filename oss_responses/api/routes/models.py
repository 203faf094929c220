"""``/v1/models``: the models this deployment serves (each has a Celery queue) that the caller's key may use."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from openai.types import Model

from oss_responses.api.deps import OwnerDep, SettingsDep
from oss_responses.errors import NotFound
from oss_responses.wire import wire_json

router = APIRouter(prefix="/v1/models", tags=["models"])

OWNER = "oss-responses"
# OpenAI's `created` is when the model was made: every model served here is gpt-oss, published
# 2025-08-05 (00:00 UTC). A constant, so every replica, restart and release answers the same.
GPT_OSS_RELEASED = 1754352000


def _model(name: str) -> dict[str, Any]:
    return wire_json(Model(id=name, object="model", created=GPT_OSS_RELEASED, owned_by=OWNER))


@router.get("")
async def list_models(settings: SettingsDep, owner: OwnerDep) -> dict[str, Any]:
    return {"object": "list", "data": [_model(name) for name in owner.usable(settings.models)]}


@router.get("/{model:path}")
async def retrieve_model(model: str, settings: SettingsDep, owner: OwnerDep) -> dict[str, Any]:
    if model not in owner.usable(settings.models):
        raise NotFound(f"The model '{model}' does not exist.", param="model", code="model_not_found")
    return _model(model)
