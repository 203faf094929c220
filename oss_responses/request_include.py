"""``include``: the extra output a request asks for, checked as a create request's is wherever it is sent
(``GET /v1/responses/{id}`` takes it in its query)."""

from __future__ import annotations

from openai.types.responses import ResponseIncludable
from pydantic import BaseModel, ConfigDict, TypeAdapter

from oss_responses.requests import parse_body

# The ``include`` value asking for reasoning items' sealed harmony messages (stateless multi-turn).
REASONING_ENCRYPTED_CONTENT = "reasoning.encrypted_content"


class _Included(BaseModel):
    """``include`` alone, checked as a create request's is (``GET /v1/responses/{id}`` takes it in its query)."""

    model_config = ConfigDict(strict=True)

    include: list[ResponseIncludable]


_included_adapter = TypeAdapter(_Included)


def parse_include(values: list[str]) -> list[ResponseIncludable]:
    """A query's ``include`` values, refused as a create's are: a 400 ``invalid_value`` naming ``include[i]``."""
    return parse_body(_included_adapter, {"include": values}).include
