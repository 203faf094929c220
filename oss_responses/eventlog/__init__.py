"""The Redis event log: one stream of pre-framed SSE events per response (see ``redis_keys``)."""

from oss_responses.eventlog.frames import frame, parse_frame
from oss_responses.eventlog.hub import EventHub
from oss_responses.eventlog.losses import EventHubStopped, StreamNotFound
from oss_responses.eventlog.writer import EventWriter
from oss_responses.eventlog.writes import EventWriteError, write_events

__all__ = [
    "EventHub",
    "EventHubStopped",
    "EventWriteError",
    "EventWriter",
    "StreamNotFound",
    "frame",
    "parse_frame",
    "write_events",
]
