"""``x-request-id``: taken from the request (or made), echoed on the response, bound to the request's log lines.

A pure ASGI middleware, so an SSE response gets the header too (a WebSocket's handshake as well, accepted or
refused) and every line logged while the request runs (its stream, its socket, included) carries
``request_id``, and ``response_id`` when the path names a response (the create route binds the new
response's id and model itself).
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oss_responses.http_protocol import REQUEST_ID, request_id_from
from oss_responses.logs import log_context

HEADER = REQUEST_ID
_ANSWER_STARTS = frozenset(("http.response.start", "websocket.accept", "websocket.http.response.start"))
_RESPONSE_PATH = re.compile(r"^/v1/responses/(resp_[A-Za-z0-9]+)")


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope.get("headers", ()))
        named = _RESPONSE_PATH.match(scope.get("path", ""))

        async def send_with_id(message: Message) -> None:
            # A WebSocket's handshake is answered too: accepted (101), or refused (its origin, its headers, its
            # key) with an HTTP answer. Its messages after that mostly skip send (socket_direct.py).
            if message["type"] in _ANSWER_STARTS:
                message["headers"] = [*message.get("headers", []), (HEADER, request_id.encode())]
            await send(message)

        with log_context(request_id=request_id, response_id=named.group(1) if named else None):
            await self.app(scope, receive, send_with_id)
