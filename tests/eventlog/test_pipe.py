from __future__ import annotations

import asyncio

import pytest

from oss_responses.eventlog.pipe import PipeBroken, RedisPipe

pytestmark = pytest.mark.anyio


class ClosedTransport(asyncio.Transport):
    """A transport closed under its protocol: uvloop's raises on write until the loss is reported."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed")


async def test_send_on_a_transport_closed_under_it_fails_its_replies_not_its_caller() -> None:
    pipe = RedisPipe()
    pipe.connection_made(ClosedTransport())
    replies = pipe.send(b"*1\r\n$4\r\nPING\r\n", 1)
    with pytest.raises(PipeBroken):
        await replies[0]
    assert not pipe.usable
