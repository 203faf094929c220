"""The WebSocket closing while a ``response.create`` is being accepted (no worker: the response stays
queued unless the socket's close cancels it)."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from typing import Any

import pytest
import websockets.sync.client as ws_client
from support import MODEL
from support.api_server import ApiServer

from oss_responses.api import jobs
from oss_responses.api.socket import ResponsesSocket
from oss_responses.storage import get_response


def test_socket_closed_while_its_create_is_accepted_cancels_the_response(
    api: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race probe: 1-7 in 60 responses stayed queued (no task: run by the stale sweep 10 minutes later)
    # or ran to their end, for a client gone.
    real, accepting, accepted = jobs.write_frames, threading.Event(), []

    async def slow_write(redis: Any, response_id: str, *args: Any, **kwargs: Any) -> Any:
        accepted.append(response_id)  # its row is inserted: the accept is half done
        accepting.set()
        await asyncio.sleep(0.3)  # the socket closes meanwhile
        return await real(redis, response_id, *args, **kwargs)

    monkeypatch.setattr(jobs, "write_frames", slow_write)
    with ws_client.connect(api.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi"}))
        assert accepting.wait(10)

    deadline = time.monotonic() + 10
    [response_id] = accepted
    while (status := api.db.run(get_response, response_id).status) != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status == "cancelled"


def test_socket_closed_leaves_no_reference_cycle_holding_it(api: ApiServer) -> None:
    # Its lane's cancelled task kept a CancelledError whose traceback held the lane's frame, whose locals held
    # the lane, which held the task: each closed connection, its last conversation with it (~0.5 MB at 50
    # turns), waited for a full collection, which the API's thresholds make rare (7 MiB more resident memory
    # per 800 long-conversation responses over 16 connections). Reference counting frees it now: with the
    # collector off, nothing of the connection stays.
    gc.collect()
    gc.disable()
    try:
        with ws_client.connect(api.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
            socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi"}))
            assert json.loads(socket.recv(timeout=10))["type"] == "response.created"  # its lane runs
            assert _live(ResponsesSocket) == 1
        deadline = time.monotonic() + 10
        while _live(ResponsesSocket) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _live(ResponsesSocket) == 0
    finally:
        gc.enable()


def _live(kind: type) -> int:
    return sum(isinstance(o, kind) for o in gc.get_objects())
