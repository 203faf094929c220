"""A TCP link to a server that can fall silent, as a blackholed network does: no byte forwarded either
way, no connection closed, no RST (a lost NAT entry or load-balancer flow, a pulled cable)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct


class SilentLink:
    """Forwards ``127.0.0.1:port`` to ``target_port`` on the running event loop until :meth:`silence`;
    from then on the connections open at that moment forward nothing for good (new ones still pass)."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._dead: set[asyncio.StreamWriter] = set()
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port = 0

    async def start(self) -> SilentLink:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def silence(self) -> None:
        """The connections open now die silently."""
        self._dead |= self._open

    def reset(self) -> None:
        """The connections open now are reset (RST, as a restarted proxy or a NAT sends), not closed; safe to
        call from another thread than the link's."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._reset)

    def _reset(self) -> None:
        for writer in list(self._open):
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

    async def stop(self) -> None:
        for writer in self._open:
            writer.transport.abort()
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        self._open.add(writer)
        with contextlib.suppress(ConnectionError, OSError):
            await asyncio.gather(self._pump(reader, upstream_writer, writer),
                                 self._pump(upstream_reader, writer, writer))
        self._open.discard(writer)
        upstream_writer.close()
        writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    client: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if client in self._dead:  # held, never forwarded: the peer neither answers nor closes
                await asyncio.Event().wait()
            writer.write(data)
            await writer.drain()
