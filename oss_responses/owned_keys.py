"""Keys a holder owns by the value it wrote in them (a run's lease, a reaper's lease on a response, a periodic
pass's lock): changed only by their owner, by a Lua compare-and-delete / compare-and-expire, so that a holder
that lost its key (it stalled past the key's expiry, and another took it) never drops or extends the other's.

A key that holds another type (set by hand, another application, a bug) is no one's: its GET is pcall'd, so
that the script answers 0 (not held) rather than WRONGTYPE (for a run's lease, a traceback each third of the
lease while the run went on, its writes refused, and its release another traceback).
"""

# KEYS: the key. ARGV: the owner's value. 1 if it was the owner's and is deleted, else 0.
RELEASE_IF_OWNED = "if redis.pcall('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
# KEYS: the key. ARGV: the owner's value, PX. 1 if it was the owner's and expires PX from now, else 0.
RENEW_IF_OWNED = (
    "if redis.pcall('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
)
# KEYS: the lease, the response's resume mark. ARGV: the owner's value, the mark, its seconds. Where the lease is the
# owner's, or nobody's (it lapsed), the mark is set and the owner's lease deleted in one step: 1. Held by another
# run (or holding another type): 0, nothing changed.
HAND_ON_UNLESS_TAKEN = (
    "local holder = redis.pcall('GET', KEYS[1]) "
    "if holder == ARGV[1] then redis.call('DEL', KEYS[1]) elseif holder then return 0 end "
    "redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3]) return 1"
)
