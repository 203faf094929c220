"""Refuse a NUL character (``%00``) in a request's path or query before any route sees it.

Ids and cursors go into SQL as they are, and PostgreSQL refuses U+0000 in text with an error the
API would otherwise answer as a 500; no id or parameter of this API can hold one.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from oss_responses.errors import BadRequest


class RefuseNulInUrl:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _has_nul(scope):
            await _refuse(send, _param_with_nul(scope))
            return
        await self.app(scope, receive, send)


def _has_nul(scope: Scope) -> bool:
    query: bytes = scope.get("query_string", b"")
    return "\x00" in scope.get("path", "") or b"%00" in query or b"\x00" in query


def _param_with_nul(scope: Scope) -> str | None:
    query = scope.get("query_string", b"").decode("latin-1")
    pairs = parse_qsl(query, keep_blank_values=True)
    return next((key.replace("\x00", "") for key, value in pairs if "\x00" in key + value), None)


async def _refuse(send: Send, param: str | None) -> None:
    error = BadRequest("The request URL may not contain the NUL character (%00).", param=param, code="invalid_value")
    body = json.dumps(error.to_body()).encode()
    await send({"type": "http.response.start", "status": error.status_code,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
