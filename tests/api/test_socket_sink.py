"""A WebSocket lane's sink: the reads the event hub may send to the socket itself, as that lane's messages."""

from __future__ import annotations

import json

from openai.types.responses import ResponseTextDeltaEvent
from support.harmony_transcripts import make_response

from oss_responses.api.socket import _LaneSink
from oss_responses.eventlog import frame
from oss_responses.harmony.emitter import EventEmitter
from oss_responses.harmony.lifecycle import emit_terminal, terminal_response, usage
from oss_responses.socket_direct import DirectSocket


class _Writer(DirectSocket):
    def __init__(self, takes: bool = True) -> None:  # no protocol: what it was offered is kept
        self.takes = takes
        self.offered: list[list[bytes]] = []

    def offer(self, messages: list[bytes]) -> bool:
        self.offered.append(messages)
        return self.takes


def _deltas(*texts: str) -> list[bytes]:
    emitter = EventEmitter(5)
    return [frame(emitter.emit(ResponseTextDeltaEvent, item_id="msg_1", output_index=0, content_index=0, delta=text,
                               logprobs=[])) for text in texts]


def test_offer_sends_each_frame_as_lane_message_with_its_stream_id() -> None:
    writer = _Writer()
    assert _LaneSink(writer, "lane-a").offer(b"".join(_deltas("a", "b")))
    [messages] = writer.offered
    assert [json.loads(message) for message in messages] == [
        {**json.loads(frame_.split(b"data: ", 1)[1]), "stream_id": "lane-a"} for frame_ in _deltas("a", "b")]


def test_offer_of_read_holding_terminal_event_is_refused_for_the_relay() -> None:
    emitter = EventEmitter(7)
    emit_terminal(emitter, terminal_response(make_response(), "completed", [], usage(0, 0, 0, 0)))
    writer = _Writer()
    assert not _LaneSink(writer, None).offer(b"".join(_deltas("a") + [frame(event) for event in emitter.drain()]))
    assert writer.offered == []


def test_offer_without_direct_socket_is_refused() -> None:
    assert not _LaneSink(None, None).offer(b"".join(_deltas("a")))


def test_offer_refused_by_socket_is_refused() -> None:
    assert not _LaneSink(_Writer(takes=False), None).offer(b"".join(_deltas("a")))
