"""Streams that lost their end: responses ended in SQL whose stream was never closed.

A response ends in two stores: its turn saved in SQL, then its stream's end marker in Redis. When
Redis goes down between the two (or the worker dies between them, or a Redis that lost its last
writes comes back), SQL says the response ended and its stream never does: every client following it
waits for the stream's TTL. Each stream a worker claims is a member of ``redis_keys.OPEN_STREAMS``
until its end marker removes it (``eventlog.writes.close_commands``), so the reaper's pass finds
these: a member that SQL no longer has running, whose lease nobody holds. It ends the stream with
what SQL holds, under the response's lease:

- the stream's last event is a terminal one (only the end marker was lost): the end marker;
- else (Redis lost the last events too) the terminal event of the stored response, numbered after the
  stream's last event, then the end marker: the stream's final object is SQL's, though the events in
  between are gone; a cancelled response gets the end marker alone, as a cancel gives it;
- the row is gone (``store: false``, or deleted): the end marker after its terminal event, or after
  a ``response.failed`` made from the stream's opening response when it has none; a deleted one's events
  then go (a tombstone of none), as they go when its worker ends it;
- its log is already archived in SQL, up to or past the stream's last event: the stream came back older
  than its end (a Redis restored from an earlier snapshot, a promoted replica that lacked the last writes).
  The archive stands and the stream becomes its tombstone: a terminal event numbered after the stream's
  last event would reuse a sequence number its clients had seen for another event, and archiving that
  shorter stream would overwrite the log of what they saw.

A stored response's log is then archived, as its worker would have done.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from openai.types.responses import Response, ResponseStreamEvent
from redis import Redis
from redis.exceptions import ResponseError
from redis.typing import StreamRangeResponse

from oss_responses import redis_keys
from oss_responses.cancel_request import note_unlisted
from oss_responses.eventlog.archive import tombstone_over
from oss_responses.eventlog.frames import parse_frame
from oss_responses.eventlog.writes import close_after
from oss_responses.harmony.emitter import EventEmitter
from oss_responses.harmony.lifecycle import emit_terminal, response_error
from oss_responses.statuses import ACTIVE_STATUSES, TERMINAL_EVENT_TYPES
from oss_responses.storage import Database, ResponseRecord, archived_last_sequence_number, get_response
from oss_responses.workers.archive import archive_event_log, drop_event_log
from oss_responses.workers.job import stored_response

log = logging.getLogger(__name__)

END_LOST_MESSAGE = "stream_end_lost: the response ended while its event log was unreachable, and its row is gone"


def list_open_stream(redis: Redis, response_id: str) -> None:
    """The response's stream listed among the open streams, so that the reaper ends it should its end be lost. A
    safety net, not the work at hand: where the key holds another type (by hand, another application, a bug; the
    reaper's next pass replaces it) the listing is skipped with a WARNING, rather than failing the task with
    WRONGTYPE."""
    try:
        redis.sadd(redis_keys.OPEN_STREAMS, response_id)
    except ResponseError as exc:
        note_unlisted(exc, response_id)

def end_unclosed_stream(
    db: Database, redis: Redis, response_id: str, *, ttl_seconds: int, unstored_ttl_seconds: int | None = None
) -> bool:
    """End the stream of a response that ended in SQL (or whose row is gone); True if this wrote its end, kept
    ``ttl_seconds`` (a ``store: false`` one's ``unstored_ttl_seconds``, as its worker's end keeps it). The caller
    holds the response's lease, so no worker writes the stream meanwhile."""
    record = db.run(get_response, response_id)
    if record is not None and record.status in ACTIVE_STATUSES:
        return False  # still running or waiting: its worker (or its takeover) ends the stream
    tail = _entry(redis.xrevrange(redis_keys.events(response_id), count=1))
    if tail is None or b"end" in tail:  # closed after all, or gone with a Redis that kept nothing
        redis.srem(redis_keys.OPEN_STREAMS, response_id)
        return False
    last = parse_frame(tail[b"f"])
    if record is not None and _archived_over(db, redis, record, last["sequence_number"], ttl_seconds):
        return True
    stored = record.store if record is not None else _was_stored(redis, response_id)
    status, events = _ending(redis, response_id, record, last)
    close_after(redis, response_id, events, status, ttl_seconds if stored else unstored_ttl_seconds or ttl_seconds)
    log.warning("the stream of %s (%s in SQL) had lost its end: ended after event %d with %s",
                response_id, record.status if record else "gone", last["sequence_number"],
                events[0].type if events else "its end marker alone")
    if record is not None and stored:
        archive_event_log(db, redis, response_id, ttl_seconds=ttl_seconds)
    elif stored:
        # A stored response whose row is gone was deleted while it ran (its worker lost before its end, or the
        # end lost): its events go with it, as its worker's own end drops them, not kept for the event TTL.
        drop_event_log(redis, response_id)
    return True


def _archived_over(db: Database, redis: Redis, record: ResponseRecord, last: int, ttl_seconds: int) -> bool:
    """The stream replaced by the tombstone of the log SQL already archived, if that log reaches its last
    event ``last``; True if it was."""
    archived_last = db.run(archived_last_sequence_number, record.id)
    if archived_last is None or archived_last < last:
        return False
    tombstone_over(redis, record.id, record.status, archived_last, ttl_seconds)
    log.warning("the stream of %s (%s in SQL) came back older than its archived log (Redis restored from an "
                "earlier state?): it ends at event %d, the archive at %d; the archive stands, the stream is its "
                "tombstone", record.id, record.status, last, archived_last)
    return True


def _ending(
    redis: Redis, response_id: str, record: ResponseRecord | None, last: dict[str, Any]
) -> tuple[str, list[ResponseStreamEvent]]:
    """The end marker's status and the events to write before it."""
    if last["type"] in TERMINAL_EVENT_TYPES:
        return str(last["response"]["status"]), []
    if record is None:
        response = _opening_response(redis, response_id).model_copy(
            update={"status": "failed", "error": response_error("server_error", END_LOST_MESSAGE)}
        )
    else:  # SQL's status even where the stored JSON did not validate (a placeholder); cancelled: no event
        response = stored_response(record).model_copy(update={"status": record.status})
    emitter = EventEmitter(last["sequence_number"] + 1)
    emit_terminal(emitter, response)
    return str(response.status), emitter.drain()


def _opening_response(redis: Redis, response_id: str) -> Response:
    """The Response of the stream's first event (``response.created``, written when it was accepted)."""
    first = _entry(redis.xrange(redis_keys.events(response_id), count=1))
    assert first is not None  # the stream has a last entry, so it has a first
    return Response.model_validate(parse_frame(first[b"f"])["response"])


def _was_stored(redis: Redis, response_id: str) -> bool:
    """Whether the stream's first event's response was stored (``store`` left out or true): its row, now gone,
    was deleted; not so for a ``store: false`` one, whose row goes at its end."""
    first = _entry(redis.xrange(redis_keys.events(response_id), count=1))
    response = parse_frame(first[b"f"]).get("response") if first is not None and b"f" in first else None
    return isinstance(response, dict) and response.get("store") is not False


def _entry(entries: StreamRangeResponse | None) -> dict[bytes, bytes] | None:
    """The fields of the one entry an XRANGE or XREVRANGE of COUNT 1 returned (None: the stream is gone)."""
    if not entries:
        return None
    fields = entries[0][1]
    assert fields is not None  # only XCLAIM/XAUTOCLAIM replies hold deleted entries
    return cast(dict[bytes, bytes], fields)  # the client does not decode responses
