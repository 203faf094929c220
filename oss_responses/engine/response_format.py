"""A request's response format (``text.format``): as engines receive it, and read back from a prompt.

The worker passes it to the engine in ``SamplingSettings.extra`` (:func:`structured_output_spec`,
for vLLM's structured-output logits processor, ``engine/structured.py``). The scripted engine reads it
back from the prompt instead, as any model would.

Engines see only prompt tokens; the render puts ``text.format`` in its developer message's
``# Response Formats`` section (``harmony/render.py``): ``## NAME`` then the schema as one line of
JSON, or the json_object sentence. The last such section is the renderer's (it follows the
instructions, which a user could fill with anything).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from openai_harmony import Message, Role

from oss_responses.harmony.render import JSON_OBJECT_FORMAT, RESPONSE_FORMATS_HEADING

STRUCTURED_OUTPUT_KEY = "structured_output"
# The strict functions' parameters by recipient (``harmony.render.strict_functions``), for the same processor.
STRICT_CALLS_KEY = "strict_calls"
# A call tool_choice requires whose header the worker began (``to=functions.``): its tokens ("after") and
# the rest of each header the model may finish it with ("rests"), for the same processor.
REQUIRED_CALL_KEY = "required_call"


def structured_output_spec(text_format: Any) -> dict[str, Any] | None:
    """The ``SamplingSettings.extra[STRUCTURED_OUTPUT_KEY]`` for a request's ``text.format`` (None: free text)."""
    if text_format is None or text_format.type == "text":
        return None
    if text_format.type == "json_object":
        return {"type": "json_object"}
    return {"type": "json_schema", "schema": (text_format.model_extra or {}).get("schema", {})}


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    type: Literal["json_schema", "json_object"]
    schema: Any = None  # json_schema only


def requested_format(messages: list[Message]) -> ResponseFormat | None:
    """The format the renderer's developer message asks for (None: free text).

    The renderer's is the message right after the system message. Developer messages of the input
    (Codex CLI sends its instructions as one) come after it and are the user's text."""
    if len(messages) < 2 or messages[1].author.role != Role.DEVELOPER:
        return None
    text = "".join(getattr(part, "text", "") for part in messages[1].content)
    start = text.rfind(RESPONSE_FORMATS_HEADING)
    if start < 0:
        return None
    section = text[start + len(RESPONSE_FORMATS_HEADING):]
    if section.startswith(JSON_OBJECT_FORMAT):
        return ResponseFormat("json_object")
    if not section.startswith("## ") or "\n\n" not in section:
        return None
    body = section.split("\n\n", 1)[1]
    try:
        schema, _ = json.JSONDecoder().raw_decode(body)
    except ValueError:
        return None
    return ResponseFormat("json_schema", schema)
