"""A pool of MCP client sessions, reused across tool calls and responses.

Connecting costs about 50 ms; a call on an open session about 3 ms. Sessions are keyed by
(url, hash of the headers), so two requests with different credentials never share one. The pool
lives on ONE asyncio loop (the worker's engine loop) and must only be used from it.

Clients connect in the SDK's "auto" mode: a 2026 server needs no protocol session (so it survives a
server restart; a call measured 2.4 ms), an older server gets the initialize handshake (3.4 ms).
Each session is held open by an owner task: the mcp SDK's transports are anyio task groups whose
enter and exit must happen in the same task, while calls come from many tasks. A call that fails
because the connection broke (the server restarted, say) drops the session and is retried once on a
fresh one; a tool that answers with an error is not a broken connection. A server dying in the middle
of a call may therefore see that call twice. Header values (credentials) are never logged or
put in an exception message.
"""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST

from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.tools.endpoints import McpEndpoint
from oss_responses.tools.pinned_http import pinned_client_factory

logger = logging.getLogger(__name__)

# What a dead connection raises; an MCPError (the server answered) is deliberately not here.
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    httpx2.TransportError,
    httpx2.HTTPStatusError,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    ConnectionError,
)
# Retried once on a new session: a dead connection, or an MCPError that says the session is gone.
_RETRIED_ERRORS: tuple[type[BaseException], ...] = (*_CONNECTION_ERRORS, MCPError)
T = TypeVar("T")


class McpUnavailable(Exception):
    """The server could not be reached, or the connection broke (the message holds no secrets)."""


def tool_spec(tool: mcp_types.Tool) -> McpToolSpec:
    """A listed tool as the rest of the service sees it (annotations under their MCP names, as the server
    sent them and as OpenAI's ``mcp_list_tools`` items show them: ``readOnlyHint``)."""
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    return McpToolSpec(tool.name, tool.description or "", dict(tool.input_schema), annotations)


class _Session:
    """One open MCP client session, held by its owner task until closed."""

    def __init__(self, endpoint: McpEndpoint) -> None:
        self.endpoint = endpoint
        self.client: Client | None = None
        self.last_used = time.monotonic()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def open(self, timeout: float) -> None:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp-session {_safe_url(self.endpoint.url)}")
        try:
            async with asyncio.timeout(timeout):
                self.client = await asyncio.shield(ready)
        except BaseException:
            await self.close()
            raise

    async def _hold(self, ready: asyncio.Future[Client]) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = Client(self._transport(stack), mode="auto")
                await stack.enter_async_context(client)
                ready.set_result(client)
                await self._closing.wait()
        except BaseException as exc:  # boundary: report to the opener, or log a session dying later
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpUnavailable("session cancelled"))
            elif not self._closing.is_set():
                logger.info("MCP session to %s ended: %s", _safe_url(self.endpoint.url), type(exc).__name__)

    def _transport(self, stack: AsyncExitStack) -> Any:
        headers = dict(self.endpoint.headers)
        endpoint = self.endpoint
        factory = (
            pinned_client_factory(endpoint.url, endpoint.addresses, within=endpoint.within)
            if endpoint.addresses else create_mcp_http_client
        )
        if endpoint.transport == "sse":
            return sse_client(endpoint.url, headers=headers, httpx_client_factory=factory)
        http_client = factory(headers=headers)
        stack.push_async_exit(http_client)
        return streamable_http_client(self.endpoint.url, http_client=http_client)

    @property
    def alive(self) -> bool:
        return self.client is not None and self._task is not None and not self._task.done()

    async def close(self) -> None:
        self._closing.set()
        if self._task is not None:
            try:
                async with asyncio.timeout(5):
                    await self._task
            except Exception:  # it did not finish in time (or failed closing): stop it
                self._task.cancel()


class McpSessionPool:
    """MCP sessions keyed by (url, headers hash), opened on first use and reused until closed."""

    def __init__(self, *, connect_timeout: float = 10.0, idle_seconds: float = 600.0) -> None:
        self.connect_timeout = connect_timeout
        self.idle_seconds = idle_seconds
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def client(self, endpoint: McpEndpoint) -> Client:
        """The open session for this endpoint, connecting if there is none (raises McpUnavailable)."""
        await self._close_idle()
        key = endpoint.key
        async with self._locks.setdefault(key, asyncio.Lock()):
            session = self._sessions.get(key)
            if session is None or not session.alive:
                session = await self._connect(endpoint)
                self._sessions[key] = session
            session.last_used = time.monotonic()
            assert session.client is not None
            return session.client

    async def list_tools(self, endpoint: McpEndpoint, timeout: float) -> list[McpToolSpec]:
        async def list_all(client: Client) -> list[McpToolSpec]:
            tools: list[McpToolSpec] = []
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(tool_spec(tool) for tool in page.tools)
                if not (cursor := page.next_cursor):
                    return tools

        return await self._with_retry(endpoint, timeout, list_all)

    async def call_tool(
        self, endpoint: McpEndpoint, name: str, arguments: dict[str, Any], timeout: float, *, resend: bool = False
    ) -> mcp_types.CallToolResult:
        """Call a tool; raises TimeoutError, McpUnavailable, or MCPError (a protocol-level refusal).

        A call is sent again on a new session only when the server cannot have run it (it did not know
        the session, or the connection was never made), unless ``resend`` (the tool is idempotent): a
        connection that broke after the call was sent may have broken after the tool ran, and running a
        tool with side effects twice is worse than telling the model it may not have run. Such a call's
        pooled session is pinged first, so that one whose server restarted is replaced before it."""
        return await self._with_retry(endpoint, timeout, lambda client: client.call_tool(name, arguments),
                                      resend=resend)

    async def _with_retry(
        self, endpoint: McpEndpoint, timeout: float, action: Callable[[Client], Awaitable[T]], *, resend: bool = True
    ) -> T:
        attempts_left = 2
        async with asyncio.timeout(timeout):
            while True:  # each attempt returns or raises; only a first broken connection is retried
                attempts_left -= 1
                client = await self.client(endpoint)
                if not resend and endpoint.transport == "sse":
                    client = await self._live(endpoint, client)
                try:
                    return await action(client)
                except _RETRIED_ERRORS as exc:
                    if isinstance(exc, MCPError) and not _session_lost(exc):
                        raise
                    await self._discard(endpoint, client)
                    if not resend and not _never_sent(exc):
                        raise McpUnavailable(
                            f"the connection to the MCP server broke after the call was sent ({type(exc).__name__}): "
                            "the tool may have run; it is not marked idempotent, so it was not sent again"
                        ) from exc
                    if not attempts_left:
                        raise McpUnavailable(f"connection to the MCP server broke ({type(exc).__name__})") from exc

    async def _live(self, endpoint: McpEndpoint, client: Client) -> Client:
        """The session, pinged first for a call that must not be sent twice: one whose connection died
        meanwhile (its server restarted) is replaced now, before the call is on it. Only an SSE session
        lives in a connection (streamable HTTP's 2026 protocol keeps none, and has no ping)."""
        try:
            with warnings.catch_warnings():  # deprecated in the 2026 protocol; an SSE session speaks the old one
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.send_ping()
        except _RETRIED_ERRORS as exc:
            if isinstance(exc, MCPError) and not _session_lost(exc):
                return client  # it answered (a server without ping says so): the session is alive
            await self._discard(endpoint, client)
            return await self.client(endpoint)
        return client

    async def _connect(self, endpoint: McpEndpoint) -> _Session:
        session = _Session(endpoint)
        try:
            await session.open(self.connect_timeout)
        except Exception as exc:
            raise McpUnavailable(f"cannot connect to the MCP server ({_reason(exc)})") from exc
        return session

    async def _discard(self, endpoint: McpEndpoint, client: Client) -> None:
        session = self._sessions.get(endpoint.key)
        if session is not None and session.client is client:
            del self._sessions[endpoint.key]
            await session.close()

    async def _close_idle(self) -> None:
        cutoff = time.monotonic() - self.idle_seconds
        for key, session in list(self._sessions.items()):
            if session.last_used < cutoff or not session.alive:
                del self._sessions[key]
                lock = self._locks.get(key)
                if lock is not None and not lock.locked():
                    del self._locks[key]
                await session.close()

    async def close(self) -> None:
        """Close every session (worker shutdown)."""
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(session.close() for session in sessions), return_exceptions=True)


def _safe_url(url: str) -> str:
    """The URL without userinfo, query or fragment (where tokens hide), for logs."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"


def _never_sent(exc: BaseException) -> bool:
    """The server cannot have run the request: no connection was made, or it did not know the session."""
    if isinstance(exc, MCPError):
        return _session_unknown(exc)
    return isinstance(exc, (httpx2.ConnectError, httpx2.ConnectTimeout))


def _session_lost(exc: MCPError) -> bool:
    """The connection closed, or the server no longer knows the session (it restarted): no tool ran."""
    return exc.code == CONNECTION_CLOSED or _session_unknown(exc)


def _session_unknown(exc: MCPError) -> bool:
    """The server answered that it does not know the session (it restarted): it ran nothing."""
    return exc.code == INVALID_REQUEST and exc.message in ("Session not found", "Session terminated")


def _reason(exc: BaseException) -> str:
    """A short cause without URLs or headers: the innermost exception's type."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "connect timed out"
    return type(exc).__name__
