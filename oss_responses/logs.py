"""Logging: configured once per process (API ``__main__``, the worker's Celery ``setup_logging`` signal).

Every line carries what it is about: ``response_id``, ``model``, ``worker_id`` and ``request_id`` come from
context variables, bound by :func:`log_context` where the work starts (the API's request middleware and
create route, the worker's task thread). A coroutine the task thread hands to the engine loop runs in a
copy of that thread's context (``run_coroutine_threadsafe`` captures it), and asyncio tasks copy the
context they were created in, so lines logged on the loop for a response carry it too; work shared by
every response (the event writer's flushes and their reply callbacks) runs in an empty context instead.

``log_format``: ``json`` (one JSON object per line: ``time``, ``level``, ``logger``, ``message``, the
context fields that are set, ``exc_info``) or ``text`` for a terminal.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from oss_responses.config import Settings

CONTEXT_FIELDS = ("request_id", "response_id", "model", "worker_id")
_vars: dict[str, ContextVar[str | None]] = {name: ContextVar(f"log_{name}", default=None) for name in CONTEXT_FIELDS}

CHATTY_LIBRARIES = ("httpx", "httpcore", "mcp", "sse_starlette")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s"


def bind(**fields: str | None) -> list[Token[str | None]]:
    """Set context fields for the rest of this context; the tokens undo it (:func:`unbind`)."""
    return [_vars[name].set(value) for name, value in fields.items()]


def unbind(tokens: list[Token[str | None]]) -> None:
    for token in reversed(tokens):
        token.var.reset(token)


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    tokens = bind(**fields)
    try:
        yield
    finally:
        unbind(tokens)


def current(name: str) -> str | None:
    return _vars[name].get()


class ContextFilter(logging.Filter):
    """Copies the bound context fields onto each record (a field passed in ``extra=`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        parts = []
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None) or _vars[name].get()
            setattr(record, name, value)
            if value is not None:
                parts.append(f"{name}={value}")
        record.context = " [" + " ".join(parts) + "]" if parts else ""
        return True


class WebSocketTrafficFilter(logging.Filter):
    """Drops the websockets library's DEBUG lines of traffic: the handshake's headers (``< authorization:
    Bearer ...``) and each frame's start and end (a ``response.create`` with its tools' credentials).
    uvicorn hands the library its ``uvicorn.error`` logger; the library marks traffic in with ``<`` and out
    with ``>``. Its other DEBUG lines (the connection's state) stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG or not isinstance(record.msg, str):
            return True
        if record.name != "uvicorn.error" and not record.name.startswith("websockets"):
            return True
        return not record.msg.startswith(("<", ">"))


class AccessQueryFilter(logging.Filter):
    """uvicorn's access lines without the query string's values: a client that puts its key there
    (``?api_key=sk-...``, refused with a 401) had it written whole in the log. The parameters' names stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            path = str(args[2])
            if "?" in path:
                route, query = path.split("?", 1)
                names = [part.split("=", 1)[0] for part in query.split("&")]
                record.args = (*args[:2], route + "?" + "&".join(f"{name}=..." for name in names), *args[3:])
        return True


_stream_cut: ContextVar[bool] = ContextVar("stream_cut", default=False)
UNFINISHED_RESPONSE = "ASGI callable returned without completing response."  # uvicorn's ERROR line


def note_stream_cut() -> None:
    """This request's response is left unfinished on purpose: a stopping API cuts its SSE streams (their
    clients resume elsewhere), and logs so itself. Set in the request's task, where uvicorn logs."""
    _stream_cut.set(True)


class CutStreamFilter(logging.Filter):
    """Drops uvicorn's ERROR for a response left unfinished when it was cut on purpose (one per stream
    a deploy cut, which read as a fault); any other unfinished response stays an ERROR."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_stream_cut.get() and record.name == "uvicorn.error" and record.msg == UNFINISHED_RESPONSE)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def say_as_json(msg: str, f: Any = None) -> None:
    """Celery's ``celery.apps.worker.safe_say``, as a JSON log line on stderr: Celery writes its shutdown
    lines ("worker: Warm shutdown (MainProcess)") from its signal handlers with ``os.write``, past logging,
    so a JSON log had plain text among its lines. Written the same way (no lock a signal could find held)."""
    line = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), "level": "INFO",
            "logger": "celery.apps.worker", "message": msg.strip()}
    try:
        os.write(2, (json.dumps(line, ensure_ascii=False) + "\n").encode())
    except OSError:  # a closed stderr: the line is not worth a crash
        pass


def make_handler(log_format: str, stream: Any = None) -> logging.Handler:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(WebSocketTrafficFilter())
    handler.addFilter(AccessQueryFilter())
    handler.addFilter(CutStreamFilter())
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    return handler


def configure_logging(settings: Settings) -> None:
    """The root logger gets one handler in the configured format; libraries' loggers propagate to it."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(make_handler(settings.log_format))
    logging.captureWarnings(True)  # a library's warning is a log line too (one JSON object), not raw stderr
    level = logging.getLevelName(settings.log_level.upper())
    root.setLevel(level)
    # Above DEBUG, the HTTP clients' line per request (MCP calls, webhook POSTs) is noise: warnings only.
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(level if level <= logging.DEBUG else logging.WARNING)


def safe_url(url: str) -> str:
    """The URL without its userinfo (where passwords are), for log lines and reports."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=netloc).geturl()
