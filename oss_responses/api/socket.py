"""``WS /v1/responses``: the Responses API's WebSocket mode, one connection at a time.

Each ``response.create`` (``api/socket_protocol.py``) is created exactly as ``POST /v1/responses`` with
``stream: true`` creates it (``api/creating.py``: the same checks, row, task and worker), and its events
are relayed from its Redis log as socket messages instead of SSE frames. A command that fails gets an
``error`` event and the connection stays open.

Lanes (``stream_id``; none is the default lane) run side by side, each one's commands in order, at most
``MAX_ACTIVE`` responses at once per connection (later ones wait, as OpenAI queues them), at most
``MAX_LANES`` named lanes. The connection's cache (``api/socket_cache.py``) lets a turn continue an
unstored response by id. A response still running when its client goes away is cancelled, as a
streamed response is when its SSE client leaves; when the API stops, the socket is closed with 1012
(service restart) and the client reconnects to another replica.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import anyio
from fastapi import WebSocket
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.websockets import WebSocketDisconnect, WebSocketState

from oss_responses.api import creating, limits
from oss_responses.api.auth import Owner, authenticate
from oss_responses.api.body import PARSE_OFF_LOOP_BYTES, parse_json_message
from oss_responses.api.jobs import cancel_if_running
from oss_responses.api.relay import lost_stream_frame
from oss_responses.api.services import Services
from oss_responses.api.socket_cache import ConnectionCache, turn_of
from oss_responses.api.socket_protocol import (
    CreateCommand,
    error_message,
    event_message,
    parse_command,
)
from oss_responses.config import Settings
from oss_responses.errors import BadRequest, ServiceError, ServiceUnavailable, TooManyRequests
from oss_responses.eventlog.frames import frame, is_terminal, parse_frame, split_frames
from oss_responses.eventlog.losses import EventHubStopped, StreamLost
from oss_responses.harmony.emitter import EventEmitter
from oss_responses.harmony.lifecycle import emit_terminal, opening_events, terminal_response, usage
from oss_responses.metrics import ACTIVE_STREAMS
from oss_responses.requests import parse_create_request
from oss_responses.socket_direct import DirectSocket, direct_socket
from oss_responses.stopping import cancel_and_wait

log = logging.getLogger(__name__)

MAX_ACTIVE = 16  # responses running at once on one connection, as OpenAI allows
MAX_LANES = 32  # distinct named lanes of one connection
# Commands received but not yet running, all lanes together: 300 waiting 1 MB creates had grown the API
# by 350-380 MB (a command may be 16 MiB), enough for a few connections to get the process killed.
MAX_WAITING_COMMANDS = 64
MAX_WAITING_BYTES = 64 * 1024 * 1024
SERVICE_RESTART = 1012  # the close code of a server that restarts: the client may reconnect at once


# A waiting command is held as its message's bytes when larger than this, and parsed again when its turn
# comes: parsed, a message of small items takes ~18x its size (two connections of 20 waiting 1.26 MiB
# messages grew the API by 920 MiB).
KEEP_PARSED_BYTES = 16 * 1024


@dataclass(frozen=True)
class _Waiting:
    parsed: CreateCommand | None
    raw: bytes | None
    size: int  # its message's bytes


@dataclass(eq=False)
class _Lane:
    stream_id: str | None
    commands: asyncio.Queue[_Waiting] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None
    running: str | None = None  # the response it relays now, until its log ends
    accepting: asyncio.Task[creating.Accepted] | None = None  # its create's accept, while it runs


def _parse_command(raw: bytes, settings: Settings) -> CreateCommand:
    return parse_json_message(raw, settings, then=lambda message: parse_command(limits.counted(settings, message)))


class ResponsesSocket:
    def __init__(self, websocket: WebSocket, services: Services) -> None:
        self._ws = websocket
        self._services = services
        # The handshake's key, checked again by each create, as each HTTP request is: a revocation holds at once.
        self._authorization = websocket.headers.get("authorization")
        self._lanes: dict[str | None, _Lane] = {}
        self._waiting = 0  # commands received, not yet running
        self._waiting_bytes = 0
        self._active = asyncio.Semaphore(MAX_ACTIVE)
        self._sending = asyncio.Lock()
        self._cache = ConnectionCache()

    async def serve(self) -> None:
        await self._ws.accept()
        try:
            while (raw := await self._receive()) is not None:
                await self._dispatch(raw)
        except WebSocketDisconnect:
            pass  # an error event could not be sent: the client is gone
        finally:
            await self._stop_lanes()

    async def _receive(self) -> bytes | None:
        """The next message's bytes; None once the client is gone."""
        message = await self._ws.receive()
        if message["type"] == "websocket.disconnect":
            return None
        text = message.get("text")
        return text.encode() if text is not None else message.get("bytes") or b""

    async def _dispatch(self, raw: bytes) -> None:
        stream_id = None
        try:
            command = await self._command(raw)
            stream_id = command.stream_id
            self._check_room(len(raw))
            lane = self._lane(stream_id)
        except ServiceError as exc:
            await self._send(error_message(exc, stream_id))
            return
        self._waiting += 1
        self._waiting_bytes += len(raw)
        small = len(raw) <= KEEP_PARSED_BYTES
        lane.commands.put_nowait(_Waiting(command if small else None, None if small else raw, len(raw)))

    async def _command(self, raw: bytes) -> CreateCommand:
        """The message parsed and checked as an HTTP body is: off the loop when large (a 14 MiB message of
        five million empty objects held every stream of the process for seconds)."""
        if len(raw) <= PARSE_OFF_LOOP_BYTES:
            return _parse_command(raw, self._services.settings)
        return await anyio.to_thread.run_sync(_parse_command, raw, self._services.settings)

    def _check_room(self, size: int) -> None:
        if self._waiting >= MAX_WAITING_COMMANDS or self._waiting_bytes + size > MAX_WAITING_BYTES:
            raise TooManyRequests(
                f"Too many commands wait on this connection (at most {MAX_WAITING_COMMANDS}, "
                f"{MAX_WAITING_BYTES // 2**20} MiB together); this one was not queued. Send it once earlier ones "
                "have started.", code="websocket_queue_full",
            )

    def _lane(self, stream_id: str | None) -> _Lane:
        lane = self._lanes.get(stream_id)
        if lane is not None:
            return lane
        if stream_id is not None and sum(key is not None for key in self._lanes) >= MAX_LANES:
            raise BadRequest(f"A connection runs at most {MAX_LANES} named streams.", param="stream_id",
                             code="websocket_stream_limit_reached")
        lane = self._lanes[stream_id] = _Lane(stream_id)
        lane.task = asyncio.create_task(self._run_lane(lane))
        return lane

    async def _run_lane(self, lane: _Lane) -> None:
        try:
            while True:
                waiting = await lane.commands.get()
                async with self._active:
                    command = waiting.parsed or await self._command(waiting.raw or b"")
                    self._waiting -= 1
                    self._waiting_bytes -= waiting.size
                    await self._run(lane, command)
        except (WebSocketDisconnect, EventHubStopped):
            pass  # the socket is closed or closing: serve() stops every lane

    async def _run(self, lane: _Lane, command: CreateCommand) -> None:
        body = self._cache.expand(command.body)
        try:
            if command.generate:
                await self._generate(lane, body)
            else:
                await self._warm_up(lane, body)
        except ServiceError as exc:
            await self._refuse(lane, command, exc)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            log.warning("Redis unreachable on a WebSocket response.create (%s: %s)", type(exc).__name__, exc)
            await self._refuse(lane, command, ServiceUnavailable(
                "The service cannot reach its Redis right now. Retry shortly.", code="redis_unavailable"))
        except (WebSocketDisconnect, EventHubStopped):
            raise
        except Exception:
            log.exception("unhandled error on a WebSocket response.create")
            await self._refuse(lane, command, ServiceError("The server had an error while processing your request."))

    async def _refuse(self, lane: _Lane, command: CreateCommand, error: ServiceError) -> None:
        previous = command.body.get("previous_response_id")
        if isinstance(previous, str):
            self._cache.forget(lane.stream_id, previous)  # as OpenAI: a failed same-lane continuation evicts it
        await self._send(error_message(error, lane.stream_id))

    async def _owner_now(self) -> Owner:
        return await authenticate(self._services.settings, self._services.db, self._authorization)

    async def _generate(self, lane: _Lane, body: dict[str, Any]) -> None:
        owner = await self._owner_now()
        # Shielded: a socket closing mid-accept would otherwise leave a row without its task (queued until
        # the stale-queued sweep ran it, minutes later, for nobody) or a task nobody cancels; _stop_lanes
        # waits for the accept instead, then cancels what it accepted.
        lane.accepting = asyncio.ensure_future(creating.create(self._services, parse_create_request(body), owner))
        try:
            accepted = await asyncio.shield(lane.accepting)
        except asyncio.CancelledError:
            raise  # lane.accepting stays: _stop_lanes waits for it
        except BaseException:
            lane.accepting = None
            raise
        lane.accepting = None
        lane.running = accepted.response_id
        ACTIVE_STREAMS.inc()
        try:
            await self._relay(lane, body, accepted.response_id, accepted.opening)
        finally:
            ACTIVE_STREAMS.dec()
        lane.running = None

    async def _relay(self, lane: _Lane, body: dict[str, Any], response_id: str, opening: list[bytes]) -> None:
        """Send the response's events to the end of its log: a read's frames that find this iteration waiting
        go to the socket from the hub's dispatch (:class:`_LaneSink`), the others through here."""
        sink = _LaneSink(direct_socket(self._ws.scope), lane.stream_id)
        reads = await self._services.hub.open(response_id, after=len(opening) - 1, history=False, client_stream=True,
                                              chunked=True, sink=sink)
        for opening_frame in opening:
            await self._send(event_message(opening_frame, lane.stream_id))
        try:
            async for read in reads:  # a quiet stream's keepalive too: a client's idle timer counts messages
                for event_frame in split_frames(read):
                    await self._send_event(lane, body, response_id, event_frame)
        except StreamLost as lost:
            await self._send(event_message(lost_stream_frame(response_id, lost), lane.stream_id))
            await _cancel_quietly(self._services, response_id)  # as a relay to SSE does: nobody follows it now
        except EventHubStopped:
            await self._close(SERVICE_RESTART, "the API is stopping")
            raise

    async def _send_event(self, lane: _Lane, body: dict[str, Any], response_id: str, event_frame: bytes) -> None:
        if is_terminal(event_frame):
            # Before the client sees it: its next create, on any lane, may continue this response.
            output = parse_frame(event_frame)["response"]["output"]
            self._cache.remember(lane.stream_id, turn_of(body, response_id, output))
        await self._send(event_message(event_frame, lane.stream_id))

    async def _warm_up(self, lane: _Lane, body: dict[str, Any]) -> None:
        """``generate: false``: the request checked and its conversation kept for the next turn; a
        response that ends at once, with no output (nothing is stored, nothing runs)."""
        queued = await creating.plan_response(self._services, parse_create_request(body), await self._owner_now())
        events = opening_events(queued.response)
        emitter = EventEmitter(len(events))
        emit_terminal(emitter, terminal_response(queued.response, "completed", [], usage(0, 0, 0, 0)))
        self._cache.remember(lane.stream_id, turn_of(body | {"store": False}, queued.response.id, []))
        for event in (*events, *emitter.drain()):
            await self._send(event_message(frame(event), lane.stream_id))

    async def _send(self, text: str) -> None:
        async with self._sending:
            if self._ws.application_state is not WebSocketState.CONNECTED:
                raise WebSocketDisconnect(1006)
            await self._ws.send_text(text)

    async def _close(self, code: int, reason: str) -> None:
        """Closed once: every lane's relay learns that the hub stopped, and Starlette refuses a second close."""
        async with self._sending:
            if self._ws.application_state is WebSocketState.CONNECTED:
                await self._ws.close(code, reason)

    async def _stop_lanes(self) -> None:
        """The client is gone (or the API stops): every lane stopped, every response it ran cancelled."""
        for lane in self._lanes.values():
            await cancel_and_wait(lane.task)
        for lane in self._lanes.values():
            if lane.accepting is not None:
                lane.running = await _accepted_id(lane.accepting)
            if lane.running is not None:
                await _cancel_quietly(self._services, lane.running)
            # A cancelled task keeps its CancelledError, whose traceback holds the lane's frame, whose locals hold
            # the lane, which held the task: a cycle that kept the whole connection (its cached conversation
            # too, ~0.5 MB at 50 turns) until a full garbage collection, which the API's thresholds make rare.
            lane.task = lane.accepting = None
        self._lanes.clear()


class _LaneSink:
    """A lane's socket as the event hub writes to it (``eventlog.following.Sink``): a read's frames as the
    lane's messages, unless one of them ends the response (its turn is cached first, by the relay) or the
    socket would make a send wait (``socket_direct.DirectSocket``). Refused, the read goes through the relay."""

    __slots__ = ("_writer", "_stream_id")

    def __init__(self, writer: DirectSocket | None, stream_id: str | None) -> None:
        self._writer = writer
        self._stream_id = stream_id

    def offer(self, data: bytes) -> bool:
        if self._writer is None:
            return False
        frames = split_frames(data)
        if any(is_terminal(event_frame) for event_frame in frames):
            return False
        return self._writer.offer([event_message(event_frame, self._stream_id).encode() for event_frame in frames])


async def _accepted_id(accepting: asyncio.Task[creating.Accepted]) -> str | None:
    """The response a create interrupted by the socket's close accepted (None: it was refused)."""
    try:
        return (await accepting).response_id
    except Exception:  # refused (a 4xx) or failed: nothing was stored, nothing runs
        return None


async def _cancel_quietly(services: Services, response_id: str) -> None:
    try:
        await cancel_if_running(services, response_id)
    except Exception:  # the client is gone; nobody to report to
        log.exception("cancel of %s after the WebSocket closed failed", response_id)
