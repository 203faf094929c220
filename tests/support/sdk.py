"""The openai SDK's view of a response: polled until it ended, and its output items without what the
SDK's stream accumulator adds (so they compare with ours)."""

from __future__ import annotations

import time
from typing import Any

from openai import OpenAI
from openai.types.responses import Response

from oss_responses.statuses import ACTIVE_STATUSES
from oss_responses.storage import Database, get_response

_SDK_ONLY_KEYS = ("parsed", "parsed_arguments")
POLL_S = 0.02


def wait_ended(client: OpenAI, response_id: str, timeout: float = 20.0) -> Response:
    """``GET /v1/responses/{id}`` until the response left queued/in_progress; it, as retrieved then."""
    deadline = time.monotonic() + timeout
    while (response := client.responses.retrieve(response_id)).status in ACTIVE_STATUSES:
        assert time.monotonic() < deadline, f"{response_id} still {response.status}"
        time.sleep(POLL_S)
    return response


def without_parsed(value: Any) -> Any:
    """``value`` (an item's ``to_dict()``) without the SDK's ``parsed``/``parsed_arguments`` keys."""
    if isinstance(value, dict):
        return {k: without_parsed(v) for k, v in value.items() if k not in _SDK_ONLY_KEYS}
    if isinstance(value, list):
        return [without_parsed(v) for v in value]
    return value


def end_queued(client: OpenAI, db: Database, response_id: str, verb: str) -> None:
    """A queued response ended by ``verb``, as a client asks it: "cancel" (cancelled, in SQL too) or "delete"
    (gone from SQL)."""
    if verb == "cancel":
        assert client.responses.cancel(response_id).status == "cancelled"
        assert db.run(get_response, response_id).status == "cancelled"  # type: ignore[union-attr]
    else:
        assert client.responses.delete(response_id) is None  # type: ignore[func-returns-value]
        assert db.run(get_response, response_id) is None
