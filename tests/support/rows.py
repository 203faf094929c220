"""Builders of response rows and input items for tests that write to SQL directly."""

from __future__ import annotations

from itertools import count
from typing import Any

from oss_responses.storage import ResponseRecord

_numbers = count(1)


def new_response(previous_response_id: str | None = None, **overrides: Any) -> ResponseRecord:
    response_id = f"resp_{next(_numbers):04d}"
    fields: dict[str, Any] = {
        "id": response_id,
        "model": "gpt-oss-20b",
        "status": "queued",
        "background": True,
        "store": True,
        "previous_response_id": previous_response_id,
        "request": {"model": "gpt-oss-20b", "input": "hello"},
        "response": {"id": response_id, "object": "response", "status": "queued", "output": []},
    }
    return ResponseRecord(**(fields | overrides))


def message_items(n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"msg_{i}", "type": "message", "role": "user", "content": [{"type": "input_text", "text": f"m{i}"}]}
        for i in range(n)
    ]
