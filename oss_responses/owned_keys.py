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
