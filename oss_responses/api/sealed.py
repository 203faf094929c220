"""What the API checks about sealed content before it stores a request.

``include: ["reasoning.encrypted_content"]`` needs encryption keys: without them it is a 400 naming
``include`` and the setting, instead of a response whose reasoning cannot be replayed. (Sealed input
items are opened when the API plans the conversation, ``jobs.check_conversation``: a tampered or
foreign blob is a 400 naming ``input[i].encrypted_content`` there.)

An MCP tool's ``authorization`` or ``headers`` are kept sealed beside the response (never in clear in
SQL, Redis or a task), so that any worker that runs or takes over the response can use them: without
keys they are a 400 naming the field.
"""

from __future__ import annotations

from openai.types.responses.tool import Mcp

from oss_responses.errors import BadRequest
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


def check_mcp_credentials(request: CreateResponseRequest, sealer: Sealer | None) -> None:
    if sealer is not None:
        return
    for index, tool in enumerate(request.tools):
        for field in ("authorization", "headers"):
            if isinstance(tool, Mcp) and getattr(tool, field):
                raise BadRequest(
                    f"MCP credentials ('{field}') are kept sealed and need encryption keys on this server: set "
                    "OSS_RESPONSES_ENCRYPTION_KEYS (a JSON list of keys) on the API and the workers.",
                    param=f"tools[{index}].{field}",
                    code="unsupported_value",
                )
