"""The lock a periodic pass takes so that one worker at a time runs it (the reaper's, the webhook sweeper's).

Every holder sets an expiry (PX): a key without one is no lock but something set there by hand, by another
application or by a bug (a list, or a string). ``SET NX`` found such a key every pass, and no worker ran the
pass again, anywhere, silently; it is taken over instead, with a WARNING.
"""

from __future__ import annotations

import logging

from redis import Redis

from oss_responses.owned_keys import RELEASE_IF_OWNED

log = logging.getLogger(__name__)

# KEYS: the lock. ARGV: owner, PX. 1: taken. 0: held by another. 2: taken, replacing a key with no expiry.
_TAKE = """
if redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""


def take_pass_lock(redis: Redis, key: str, owner: str, ttl_ms: int) -> bool:
    """True if ``owner`` holds ``key`` for ``ttl_ms`` now."""
    taken = redis.eval(_TAKE, 1, key, owner, ttl_ms)
    if taken == 2:
        log.warning("the lock key %s held something other than a lock (no expiry: overwritten by hand, another "
                    "application or a bug), which stopped its pass on every worker for good: replaced", key)
    return bool(taken)


def release_pass_lock(redis: Redis, key: str, owner: str) -> None:
    redis.eval(RELEASE_IF_OWNED, 1, key, owner)
