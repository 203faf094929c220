"""What one request may ask for, beyond its shape: checked before anything is stored.

- ``input`` items and ``tools`` entries: at most ``max_input_items`` / ``max_tools`` (400);
- ``max_output_tokens``: at most the model's ceiling (``max_output_tokens_ceilings``, else
  ``max_output_tokens_ceiling``; 400 naming it);
- the model's Celery queue (the broker's Redis list ``responses.<model>``): it holds at most
  ``max_queued_per_model`` tasks waiting; a request finding it full is a 429 with ``Retry-After``, saying
  how many are ahead.
  The count is read, not reserved: concurrent requests may overshoot it by their number.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError

from oss_responses.api.services import Services
from oss_responses.config import Settings
from oss_responses.errors import BadRequest, ServiceUnavailable, TooManyRequests
from oss_responses.redis_refusals import wrong_type
from oss_responses.requests import CreateResponseRequest

log = logging.getLogger(__name__)


def counted(settings: Settings, body: Any) -> Any:
    """``body`` as sent, once its ``input`` and ``tools`` lists are within their limits: counted before
    anything validates their entries (a body of millions of empty items named the first one's missing
    field, not their number)."""
    if isinstance(body, dict):
        _check_counts(settings, _items(body.get("input")), _length(body.get("tools")))
    return body


def _items(value: Any) -> int:
    return len(value) if isinstance(value, list) else 1  # a string is one message


def _length(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def _check_counts(settings: Settings, items: int, tools: int) -> None:
    if items > settings.max_input_items:
        raise BadRequest(
            f"Invalid value for 'input': {items} items; this service accepts at most {settings.max_input_items}.",
            param="input", code="too_many_items",
        )
    if tools > settings.max_tools:
        raise BadRequest(
            f"Invalid value for 'tools': {tools} tools; this service accepts at most {settings.max_tools}.",
            param="tools", code="too_many_tools",
        )


def check_request_limits(settings: Settings, body: CreateResponseRequest) -> None:
    _check_counts(settings, _items(body.input), len(body.tools))
    ceiling = settings.output_tokens_ceiling(body.model)
    if body.max_output_tokens is not None and body.max_output_tokens > ceiling:
        raise BadRequest(
            f"Invalid value for 'max_output_tokens': {body.max_output_tokens} is above {ceiling}, "
            f"the most '{body.model}' may generate on this service.",
            param="max_output_tokens", code="invalid_value",
        )


async def check_queue_depth(services: Services, model: str) -> None:
    limit = services.settings.max_queued_per_model
    if limit <= 0:
        return
    try:
        waiting = await services.tasks.waiting(services.settings.queue_for(model))
    except (RedisError, OSError) as exc:
        log.warning("could not read the depth of %s's queue (%s: %s)", model, type(exc).__name__, exc)
        # A queue key holding another type (by hand, another application, a bug) is no outage: say which.
        why = ("its queue key in Redis holds something other than a list" if wrong_type(exc)
               else "its Redis is unreachable")
        raise ServiceUnavailable(
            f"The service cannot queue responses right now ({why}); nothing was stored. Retry shortly.",
            code="queue_unavailable",
        ) from exc
    if waiting >= limit:
        retry_after = services.settings.queue_full_retry_after_seconds
        raise TooManyRequests(
            f"The queue of '{model}' is full: {waiting} responses are ahead of this one "
            f"(this service queues at most {limit}). Retry after {retry_after} seconds.",
            code="queue_full", headers={"Retry-After": str(retry_after)},
        )
