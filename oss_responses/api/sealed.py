"""What the API checks about sealed content before it stores a request.

- ``include: ["reasoning.encrypted_content"]`` needs encryption keys: without them it is a 400
  naming ``include`` and the setting, instead of a response whose reasoning cannot be replayed.
- Every sealed reasoning or compaction item of the input must open under this server's keys; a tampered or
  foreign blob is a 400 naming ``input[i].encrypted_content`` here, at POST time, not a failed
  response later in the worker (which opens it again to render).
"""

from __future__ import annotations

from collections.abc import Sequence

from openai.types.responses import ResponseCompactionItemParam, ResponseReasoningItem
from pydantic import BaseModel

from oss_responses.errors import BadRequest
from oss_responses.harmony.input_items import open_sealed
from oss_responses.requests import REASONING_ENCRYPTED_CONTENT, CreateResponseRequest
from oss_responses.sealing import Sealer


def check_include(request: CreateResponseRequest, sealer: Sealer | None) -> None:
    if sealer is None and REASONING_ENCRYPTED_CONTENT in (request.include or ()):
        raise BadRequest(
            f"'{REASONING_ENCRYPTED_CONTENT}' needs encryption keys on this server: set "
            "OSS_RESPONSES_ENCRYPTION_KEYS (a JSON list of keys) on the API and the workers.",
            param="include",
            code="unsupported_value",
        )


def check_sealed_input(items: Sequence[BaseModel], sealer: Sealer | None) -> None:
    unseal = sealer.open if sealer is not None else None
    for index, item in enumerate(items):
        param = f"input[{index}].encrypted_content"
        if isinstance(item, ResponseReasoningItem) and item.encrypted_content is not None:
            open_sealed("reasoning", item.encrypted_content, unseal, param)
        elif isinstance(item, ResponseCompactionItemParam):
            open_sealed("compaction", item.encrypted_content, unseal, param)
