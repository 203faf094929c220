"""Create-request bodies the request tests share, and the 400 a body is refused with."""

from __future__ import annotations

import pytest

from oss_responses.errors import BadRequest
from oss_responses.requests import parse_create_request


def refusal(body: dict) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        parse_create_request({"model": "m", "input": "hi", **body})
    return caught.value


FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object"}}
CALC = {"type": "mcp", "server_label": "calc"}
OPEN_OBJECT = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
OPEN_OBJECT_PROBLEM = "In context=(), 'additionalProperties' is required to be supplied and to be false."
