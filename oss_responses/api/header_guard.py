"""Refuse, before any route runs, the requests whose headers the API would otherwise read one way and a proxy
or a browser another.

- **A browser's request from an origin not allowed** (``Origin`` not in ``allowed_origins``): browsers apply no
  CORS to WebSockets, and a page's simple POST reaches the API without a preflight; with no API key asked
  (``auth=open``, ``make run``'s mode) any web page open on the machine could otherwise drive the stack, and
  by DNS rebinding one that looks same-origin too. SDKs and agents send no ``Origin``. 403
  ``origin_not_allowed``; an allowed origin gets CORS headers (``app.py``). ``RefuseOrigins``.
- **Two ``Authorization`` or ``Content-Type`` headers** (single-valued, RFC 9110): Starlette reads the first,
  a gateway that adds its own key instead of replacing the client's may read the last. 400
  ``duplicate_header``.
- **A ``Content-Encoding``** other than ``identity`` (or a ``Transfer-Encoding`` other than ``chunked``):
  bodies are read as they come, and a gzipped one failed as "not valid UTF-8". 415
  ``unsupported_content_encoding``.

These two, ``RefuseUnsafeHeaders``, answer inside the CORS and request-id middlewares, as every refusal
of the API does: a browser's page reads them (without CORS headers it sees an opaque network error).
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from oss_responses.api.errors import error_response
from oss_responses.errors import BadRequest, Forbidden, ServiceError, UnsupportedMediaType

SINGLE_VALUED = (b"authorization", b"content-type")


class _HeaderRefusal:
    """Answers a request (or a WebSocket handshake) that ``_refusal`` refuses; passes on every other."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and (error := self._refusal(scope["headers"])) is not None:
            response = error_response(error)
            if scope["type"] == "http":
                await response(scope, receive, send)
            else:
                await WebSocket(scope, receive, send).send_denial_response(response)
            return
        await self.app(scope, receive, send)

    def _refusal(self, headers: list[tuple[bytes, bytes]]) -> ServiceError | None:
        raise NotImplementedError


class RefuseOrigins(_HeaderRefusal):
    """Outside CORS (``app.py``): a page of an origin not allowed gets no CORS headers, its preflight included."""

    def __init__(self, app: ASGIApp, *, allowed_origins: Iterable[str]) -> None:
        super().__init__(app)
        self.allowed_origins = frozenset(allowed_origins)

    def _refusal(self, headers: list[tuple[bytes, bytes]]) -> ServiceError | None:
        if "*" in self.allowed_origins:
            return None
        origins = (value.decode("latin-1") for name, value in headers if name == b"origin")  # any one sent
        if (origin := next((origin for origin in origins if origin not in self.allowed_origins), None)) is not None:
            return Forbidden(f"Requests from the origin {origin!r} are not allowed (OSS_RESPONSES_ALLOWED_ORIGINS).",
                             code="origin_not_allowed")
        return None


class RefuseUnsafeHeaders(_HeaderRefusal):
    """Inside CORS (``app.py``): an allowed page reads these refusals as it reads a route's errors."""

    def _refusal(self, headers: list[tuple[bytes, bytes]]) -> ServiceError | None:
        seen: dict[bytes, int] = {}
        encoding = None
        for name, value in headers:
            if name in SINGLE_VALUED:
                seen[name] = seen.get(name, 0) + 1
            elif name == b"content-encoding":
                encoding = value.decode("latin-1").strip().lower()
            elif name == b"transfer-encoding":  # uvicorn un-chunks; any other coding would reach the JSON parser
                codings = [coding.strip() for coding in value.decode("latin-1").lower().split(",")]
                encoding = next((coding for coding in codings if coding not in ("chunked", "identity")), encoding)
        if twice := next((name for name in SINGLE_VALUED if seen.get(name, 0) > 1), None):
            header = twice.decode().title()
            return BadRequest(f"The {header} header may be sent only once.", param=header, code="duplicate_header")
        if encoding not in (None, "", "identity"):
            return UnsupportedMediaType(f"Request bodies with Content-Encoding {encoding!r} are not supported; "
                                        "send the JSON body as it is.", code="unsupported_content_encoding")
        return None
