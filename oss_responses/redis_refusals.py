"""A Redis that answers but refuses writes for a while, as an outage is: full (``maxmemory`` under
``noeviction``: ``OOM command not allowed``), a replica (a failover's demoted primary: ``READONLY``), or
unable to persist its snapshot (``MISCONF``). Each passes once its operator acts, like a restart; none
is a bug or a refusal of the request. Treated as a failure, a full Redis failed every queued response
whose task it met, and the API answered its creates and cancels with a 500."""

from __future__ import annotations

from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError


def refuses_writes(exc: BaseException) -> bool:
    if isinstance(exc, (OutOfMemoryError, ReadOnlyError)):
        return True
    # redis-py has no class of its own for MISCONF: the reply's text keeps its code.
    return isinstance(exc, ResponseError) and str(exc).startswith("MISCONF")


def wrong_type(error: BaseException | str) -> bool:
    """A command refused because its key holds another type of value (WRONGTYPE): the key was overwritten, by
    hand, by another application or by a bug. Not a refusal of writes: only that key's commands fail, for
    good, so it is neither waited out nor a 503."""
    return str(error).startswith("WRONGTYPE")


# KEYS: the key. ARGV: the type it must hold (as TYPE names it: 'set', 'hash', 'string'...). 1 if it held
# another type and is deleted, else 0: how a key that WRONGTYPE keeps refusing is replaced (its next writer
# creates it anew), in one step, so that a key its rightful writer recreated meanwhile is kept.
DELETE_IF_OTHER_TYPE = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
