"""Taking a response: its lease and what the worker must know before it starts, in one round trip.

A task thread used to ask these one at a time, each a hop to the engine loop and a Redis round trip:
the lease (``SET NX PX``), a handoff's mark (``GETDEL resume``), the cancel flag, the stream's tail.
On a busy worker every hop waits for the loop and the GIL; together they were a fifth of the time
from the task message to the first token (bench/engine.py's split). One script answers them all,
and reads the rest only when the lease was taken: a worker that did not get it must not consume
the handoff mark meant for the one that did.

The task thread asks it itself, on the worker's synchronous client: even that one hop to the loop
waited for the loop's turn behind the running responses' engine steps (8 concurrent requests on the
scripted stack: 13-22 ms p50 from the row's load to the lease, for a script that takes well under one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis import Redis
from redis.exceptions import ResponseError
from redis.typing import StreamRangeResponse

from oss_responses import redis_keys
from oss_responses.redis_refusals import wrong_type
from oss_responses.workers.lease import Lease
from oss_responses.workers.stream_tail import ended_as, next_from_tail

log = logging.getLogger(__name__)

# KEYS: lease, resume, cancel, events, open streams, relay. ARGV: owner, TTL in ms, response id, and the API
# liveness key's name around an instance id (redis_keys.API_ALIVE).
# Returns nil without the lease, else {resume mark or '', cancel flag (0/1), the stream's last entry, 1 if the
# resume mark's key held another type, the relaying API instance if its liveness key is missing, else ''}; the
# stream's last entry is the error's text where the stream's key holds something else (WRONGTYPE; see Claim).
# A resume mark's key of another type is deleted, as GETDEL deletes a mark, and read as no mark (a takeover is
# counted, keeping max_takeovers' bound): its GETDEL raised WRONGTYPE after the lease was taken, the task raised
# and the response stayed where it was (queued: until the stale sweep; running: taken over again and again).
# The response joins the open streams: from now on, whoever ends it in SQL must also close its stream.
# A stream not ended loses the TTL its accept gave it (an accept that failed after writing its opening
# events may not have been able to delete them: they expire): a running stream keeps until its end.
_CLAIM = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return nil end
redis.pcall('SADD', KEYS[5], ARGV[3])  -- refused where the key holds another type: the reaper replaces it
local mark = redis.pcall('GETDEL', KEYS[2])
local overwritten_mark = 0
if type(mark) == 'table' and mark.err then
  redis.call('DEL', KEYS[2])
  mark, overwritten_mark = '', 1
end
mark = mark or ''
local relay = redis.pcall('GET', KEYS[6])
if type(relay) ~= 'string' then relay = '' end  -- none, or a key of another type: no relay to watch
-- Its process alive (the common case): nothing to watch, and no round trip more to ask.
if relay ~= '' and redis.call('EXISTS', ARGV[4] .. relay .. ARGV[5]) == 1 then relay = '' end
local tail = redis.pcall('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
if tail.err then return {mark, redis.call('EXISTS', KEYS[3]), tail.err, overwritten_mark, relay} end
local ended = false
if #tail > 0 then
  local fields = tail[1][2]
  for i = 1, #fields, 2 do
    if fields[i] == 'end' then ended = true end
  end
  if not ended then redis.call('PERSIST', KEYS[4]) end
end
return {mark, redis.call('EXISTS', KEYS[3]), tail, overwritten_mark, relay}
"""


@dataclass(frozen=True)
class Claim:
    resume_mark: bytes  # b"" when none (a handoff leaves b"handoff")
    cancel_requested: bool
    next_sequence_number: int | None  # None: the stream already ended
    ended: str | None = None  # how, when it had (its end marker's status)
    # The stream's key holds something other than a stream (set by hand, another application, a bug): no
    # event can be written there. The claim's read of it was a script error, raised after the lease was
    # taken: the task raised, the lease lapsed, the reaper dispatched it again, every lease period for good.
    overwritten: bool = False
    # The API process whose client runs it (a foreground response: ``relays.py``), when its liveness key was missing.
    missing_relay: str | None = None


def claim(redis: Redis, lease: Lease, response_id: str) -> Claim | None:
    """Take ``lease``; None if another worker holds it (then nothing else was read or changed)."""
    keys = (lease.key, redis_keys.resume(response_id), redis_keys.cancel(response_id), redis_keys.events(response_id),
            redis_keys.OPEN_STREAMS, redis_keys.relay(response_id))
    reply = redis.eval(_CLAIM, len(keys), *keys, lease.owner, lease.ttl_ms, response_id, *redis_keys.API_ALIVE)
    if reply is None:
        return None
    mark, cancel, tail, overwritten_mark, relay_reply = reply
    relay = relay_reply.decode() if relay_reply else None
    if overwritten_mark:
        log.warning("the resume mark key %s held something other than a mark (overwritten by hand, another "
                    "application or a bug): deleted, read as no mark", keys[1])
    if isinstance(tail, bytes):  # the read of the stream was refused
        if not wrong_type(tail.decode()):
            raise ResponseError(tail.decode())
        return Claim(resume_mark=mark, cancel_requested=bool(cancel), next_sequence_number=0, overwritten=True,
                     missing_relay=relay)
    # A script's reply is not parsed as XREVRANGE's would be: each entry is [id, [field, value, ...]].
    entries: StreamRangeResponse = [
        (entry_id, dict(zip(fields[::2], fields[1::2], strict=True))) for entry_id, fields in tail
    ]
    return Claim(resume_mark=mark, cancel_requested=bool(cancel), next_sequence_number=next_from_tail(entries),
                 ended=ended_as(entries), missing_relay=relay)


# KEYS: lease, events. ARGV: owner, then each opening frame's entry id and bytes. Written only while the
# lease is this run's and the stream is still empty; 1 if written.
_REOPEN = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('XLEN', KEYS[2]) > 0 then return 0 end
for i = 2, #ARGV, 2 do redis.call('XADD', KEYS[2], ARGV[i], 'f', ARGV[i + 1]) end
return 1
"""


def reopen(redis: Redis, lease: Lease, response_id: str, frames: list[tuple[int, bytes]]) -> bool:
    """Write a queued response's opening events again where its stream is gone: the accept gave them a TTL
    (``event_ttl_seconds``) that ran out while the response waited in its queue, or Redis lost them. Without
    them the run would number its events from 0 again: a follower, which saw the opening's numbers, would
    drop the run's first events, and a replay would not begin with ``response.created``."""
    entries = [part for number, data in frames for part in (redis_keys.event_id(number), data)]
    return bool(redis.eval(_REOPEN, 2, lease.key, redis_keys.events(response_id), lease.owner, *entries))
