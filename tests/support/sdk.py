"""What the openai SDK's stream accumulator adds to output items, removed so they compare with ours."""

from __future__ import annotations

from typing import Any

_SDK_ONLY_KEYS = ("parsed", "parsed_arguments")


def without_parsed(value: Any) -> Any:
    """``value`` (an item's ``to_dict()``) without the SDK's ``parsed``/``parsed_arguments`` keys."""
    if isinstance(value, dict):
        return {k: without_parsed(v) for k, v in value.items() if k not in _SDK_ONLY_KEYS}
    if isinstance(value, list):
        return [without_parsed(v) for v in value]
    return value
