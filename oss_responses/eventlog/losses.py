"""How a follower of an event stream learns that it cannot be followed on: the exceptions the hub raises
to its subscribers (``hub.py``), which the API's relay turns into an ``error`` event or an OpenAI error
(``api/relay.py``, ``api/socket.py``, ``api/jobs.py``)."""

from __future__ import annotations

from oss_responses.eventlog.entries import EntryId


class StreamNotFound(LookupError):
    """No event stream for this response: unknown id, or ended and expired."""


class StreamLost(StreamNotFound):
    """The stream vanished while it was followed: Redis lost its data (restarted without persistence)."""

    def __init__(self, cursor: EntryId) -> None:
        super().__init__("the event stream was lost")
        self.last_sequence = cursor[1] - 1  # of the last event the subscriber got (-1: none)


class StreamRewound(StreamLost):
    """The stream came back shorter than what this subscriber got (Redis restored from an earlier snapshot, or
    failed over to a replica that lacked the last writes): the events after its new end are written anew by
    the response's takeover, under numbers this subscriber has seen, and may differ."""


class StreamOverwritten(StreamLost):
    """The stream's key holds something other than a stream (WRONGTYPE): its events were overwritten, by hand
    or by a bug, and no read of it can succeed."""


class ArchiveUnreadable(StreamLost):
    """The stream was archived (moved to SQL) before this subscriber read it all, and the archive did not
    answer (its reader gave up: the database away for longer than it waits)."""


class ArchiveLost(StreamLost):
    """The stream was archived (moved to SQL) before this subscriber read it all, and the archive is gone:
    the database lost it (restored to an earlier point), or it was removed by hand."""


class EventHubStopped(RuntimeError):
    """The hub stopped while a subscriber was following a stream."""
