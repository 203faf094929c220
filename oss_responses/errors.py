"""One error hierarchy, shaped like OpenAI's, mapped once to HTTP in the API.

``ServiceError`` carries the four fields of OpenAI's error object
(``{"error": {"message", "type", "param", "code"}}``) plus the HTTP status.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ServiceError(Exception):
    status_code: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"

    def __init__(
        self, message: str, *, param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def to_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class BadRequest(ServiceError):
    status_code = 400
    type = "invalid_request_error"


class Unauthorized(ServiceError):
    """No API key, or one that is unknown or revoked (keys mode)."""

    status_code = 401
    type = "invalid_request_error"


class Forbidden(ServiceError):
    status_code = 403
    type = "invalid_request_error"


class NotFound(ServiceError):
    status_code = 404
    type = "invalid_request_error"


class Conflict(ServiceError):
    status_code = 409
    type = "invalid_request_error"


class PayloadTooLarge(ServiceError):
    status_code = 413
    type = "invalid_request_error"


class UnsupportedMediaType(ServiceError):
    status_code = 415
    type = "invalid_request_error"


class TooManyRequests(ServiceError):
    """A limit reached for now: the client may retry after the ``Retry-After`` header's seconds."""

    status_code = 429
    type = "rate_limit_error"


class ServiceUnavailable(ServiceError):
    """A dependency (Redis, the database, the broker) not answering for now: the SDKs retry after
    ``Retry-After``."""

    status_code = 503
    type = "server_error"
    RETRY_AFTER_SECONDS = 5

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.headers.setdefault("Retry-After", str(self.RETRY_AFTER_SECONDS))


class VocabularyError(RuntimeError):
    """The harmony vocabulary file is missing or is not the expected one (start-up error)."""
