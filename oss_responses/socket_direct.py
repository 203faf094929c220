"""The API's WebSocket connections, as uvicorn's sans-I/O websockets protocol serves them, with a writer the
event hub's dispatch can use.

A relayed event's message went from the hub's read through a wake of its lane's task, the hub's generators,
the connection's send lock, Starlette's ``send_text`` and an ASGI ``send`` to the websockets library's framing:
the WebSocket mode cost the API ~40 us more per event than SSE's relay, whose frames the hub writes to the
client's connection itself (``http_protocol.DirectBody``). :class:`DirectSocket` does the same for a socket:
it writes messages as uvicorn's ``send`` writes a ``websocket.send`` (the websockets connection frames them,
compressing them where the client asked for it, and the transport takes the bytes), and refuses whenever that
``send`` would wait or refuse: the handshake not done, the close sent, the transport's buffer full or closing.

Outside ``oss_responses.api`` for the reason ``http_protocol.py`` is: uvicorn's supervisor pickles it into the
processes it spawns.
"""

from __future__ import annotations

import weakref
from collections.abc import MutableMapping
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Request

DIRECT_SOCKET = "oss_responses.direct_socket"


class DirectSocket:
    """A WebSocket connection's messages written from outside the app's task. It holds its protocol weakly: the
    protocol holds the scope, which holds this."""

    __slots__ = ("_protocol",)

    def __init__(self, protocol: WebSocketsSansIOProtocol) -> None:
        self._protocol = weakref.ref(protocol)

    def offer(self, messages: list[bytes]) -> bool:
        """Send ``messages`` (UTF-8 text) now if the connection takes them without waiting; False, and nothing
        sent, otherwise."""
        protocol = self._protocol()
        if (protocol is None or protocol.disconnected or protocol.close_sent or not protocol.handshake_complete
                or protocol.initial_response is not None or not protocol.writable.is_set()
                or protocol.transport.is_closing()):
            return False
        for message in messages:
            protocol.conn.send_text(message)
        protocol.transport.write(b"".join(protocol.conn.data_to_send()))
        return True


class DirectWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O websockets protocol, its scope carrying the connection's :class:`DirectSocket`."""

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        if self.response.status_code != 101:
            return  # a handshake refused (a 4xx already sent): no scope, no app
        # The app's task is created, not yet run: it sees the scope as it is once this returns.
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
        extensions[DIRECT_SOCKET] = {"writer": DirectSocket(self)}


def direct_socket(scope: MutableMapping[str, Any]) -> DirectSocket | None:
    """The connection's :class:`DirectSocket`, where this module's protocol serves it."""
    writer = scope.get("extensions", {}).get(DIRECT_SOCKET, {}).get("writer")
    return writer if isinstance(writer, DirectSocket) else None
