"""Exception handlers: every failure leaves the API in OpenAI's error shape, never as a traceback.

- ``ServiceError`` (BadRequest, NotFound, ...) → its own status and body.
- FastAPI's request validation (query/path parameters) and JSON decode errors → 400.
- Starlette's HTTP errors (404 unknown route, 405 wrong method) → that status, OpenAI's shape.
- Redis unreachable (a refused or timed-out connection, from any route that reads or writes it) →
  503 ``redis_unavailable``, logged in one line: the client's SDK retries it, and Starlette's
  catch-all would also have reset the client's keep-alive connection after its 500.
- Redis refusing writes (full under ``noeviction``, a read-only replica, ``MISCONF``; from a command or
  from an event log's write) → 503 ``redis_unavailable`` too: it passes once its operator acts.
- The database unreachable (a refused connection, a pool that timed out, a locked SQLite), or refusing
  writes (PostgreSQL read-only in a failover; a SQLite file whose disk is full, or whose file or
  filesystem turned read-only or fails its writes) → 503 ``database_unavailable``, logged in one line, as
  Redis's, naming which.
- Anything else → 500 ``server_error``, logged with its traceback on the server side only
  (``AnswerUnexpectedErrors``: answered inside CORS and the request id, as every other error).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError as RedisResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import InterfaceError, InternalError, OperationalError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oss_responses.errors import BadRequest, ServiceError, ServiceUnavailable
from oss_responses.eventlog.writes import EventWriteError
from oss_responses.redis_refusals import refuses_writes
from oss_responses.storage.db import refused_read_only, refused_write, schema_missing

log = logging.getLogger(__name__)

# A database that did not answer: a refused connection (down, or at max_connections), a pool that timed out.
DATABASE_UNREACHABLE = (OperationalError, InterfaceError, PoolTimeoutError)


def error_body(message: str, *, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_response(error: ServiceError) -> JSONResponse:
    return JSONResponse(error.to_body(), status_code=error.status_code, headers=error.headers or None)


async def _service_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return error_response(exc)


def _param_of(loc: tuple[Any, ...]) -> str | None:
    # FastAPI locations start with where the value came from: ("query", "limit"), ("body", ...).
    parts = [str(p) for p in loc[1:]]
    return ".".join(parts) or None


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "Invalid request."}
    param = _param_of(tuple(first.get("loc", ())))
    message = f"Invalid value for '{param}': {first['msg']}" if param else str(first["msg"])
    return error_response(BadRequest(message, param=param, code="invalid_value"))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
    # Only routing raises these: a path no route has is OpenAI's "Invalid URL (METHOD /path)".
    message = f"Invalid URL ({request.method} {request.url.path})" if exc.status_code == 404 else str(exc.detail)
    return JSONResponse(error_body(message, type=kind), status_code=exc.status_code, headers=exc.headers)


async def _client_left(request: Request, exc: Exception) -> Response:
    """The client closed its connection (or it was closed for it: ``oss_responses/http_protocol.py``) before its request
    body arrived. Nobody reads the answer; not an error of the service's."""
    log.info("%s %s: the client left before its request body arrived", request.method, request.url.path)
    return Response(status_code=400)


async def _redis_unreachable(request: Request, exc: Exception) -> JSONResponse:
    log.warning("Redis unreachable on %s %s (%s: %s)", request.method, request.url.path, type(exc).__name__, exc)
    error = ServiceUnavailable("The service cannot reach its Redis right now. Retry shortly.", code="redis_unavailable")
    return error_response(error)


async def _redis_refused(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, RedisResponseError) and not refuses_writes(exc):
        return await _unexpected_error(request, exc)
    log.warning("Redis refused a write on %s %s (%s: %s)", request.method, request.url.path, type(exc).__name__, exc)
    error = ServiceUnavailable("The service's Redis is refusing writes right now (full or read-only). Retry shortly.",
                               code="redis_unavailable")
    return error_response(error)


async def _database_unreachable(request: Request, exc: Exception) -> JSONResponse:
    if schema_missing(exc):
        return await _database_not_migrated(request, exc)
    busy = _timed_out(exc)
    refused = refused_write(exc)
    what = "timed out" if busy else f"refusing writes ({refused})" if refused else "unreachable"
    log.warning("database %s on %s %s (%s: %s)", what, request.method,
                request.url.path, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    if busy:
        message = "The service's database is too busy right now (a lock or statement timeout). Retry shortly."
    elif refused:  # it answered: "cannot reach" sent its operator to look for a network fault
        message = f"The service's database is refusing writes right now ({refused}). Retry shortly."
    else:
        message = "The service cannot reach its database right now. Retry shortly."
    return error_response(ServiceUnavailable(message, code="database_unavailable"))


# PostgreSQL's lock_not_available (lock_timeout) and query_canceled (statement_timeout): the database
# answered; "cannot reach" sent its operator to look for a network fault. So did the pool's own timeout:
# every connection busy past its wait (requests held by a lock, more of them than the pool).
_TIMEOUT_SQLSTATES = ("55P03", "57014")


def _timed_out(exc: Exception) -> bool:
    if isinstance(exc, PoolTimeoutError):
        return True
    return getattr(getattr(exc, "orig", None), "sqlstate", None) in _TIMEOUT_SQLSTATES


async def _database_not_migrated(request: Request, exc: Exception) -> JSONResponse:
    log.error("the database is not migrated (%s %s): run `oss-responses migrate`", request.method, request.url.path)
    error = ServiceUnavailable("The service's database is not set up yet (its operator must run its migrations). "
                               "Retry later.", code="database_not_migrated")
    return error_response(error)


async def _programming_error(request: Request, exc: Exception) -> JSONResponse:
    if schema_missing(exc):
        return await _database_not_migrated(request, exc)
    return await _unexpected_error(request, exc)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    """psycopg's InternalError: a read-only database (a failover) is unavailable for now, not a bug."""
    if refused_read_only(exc):
        return await _database_unreachable(request, exc)
    return await _unexpected_error(request, exc)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    body = error_body("The server had an error while processing your request.", type="server_error")
    return JSONResponse(body, status_code=500)


class AnswerUnexpectedErrors:
    """The 500 of an exception no handler takes, answered inside the API's middlewares (``app.py``). Starlette
    answers it in its outermost one (the ``Exception`` handler below, kept for what a middleware raises),
    where neither CORS headers nor ``x-request-id`` are added: a browser saw an opaque network error. One
    raised after the response started is left to the server (it closes the connection)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            if started:
                raise
            response = await _unexpected_error(Request(scope), exc)
            await response(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ClientDisconnect, _client_left)
    app.add_exception_handler(RedisConnectionError, _redis_unreachable)
    app.add_exception_handler(RedisTimeoutError, _redis_unreachable)
    app.add_exception_handler(RedisResponseError, _redis_refused)
    app.add_exception_handler(EventWriteError, _redis_refused)  # its Redis answered each command with an error
    for database_error in DATABASE_UNREACHABLE:
        app.add_exception_handler(database_error, _database_unreachable)
    app.add_exception_handler(ProgrammingError, _programming_error)
    app.add_exception_handler(InternalError, _internal_error)
    app.add_exception_handler(Exception, _unexpected_error)
