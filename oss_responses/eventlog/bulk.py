"""Many Redis commands in one round trip at the cost of one command: a small Lua script.

A redis-py pipeline costs ~12 us of Python per command (packing, one awaited read and one timeout
per reply); at one XADD per event that is the worker's whole event budget. Here each chunk of up to
``CHUNK`` commands is ONE ``EVALSHA`` whose script runs them with ``redis.pcall``, so the client
packs arguments only and reads one reply per chunk; the chunks of a flush go in one write, and a
blocked XREAD wakes once per chunk with every entry in it. Chunks keep one script short (Redis runs
a script without serving other clients).

Even packing through redis-py (an isinstance chain and a few copies per argument, ~0.7 us each, four
arguments per event) was a third of the worker's per-token CPU, so the request bytes are packed here
in one ``join`` and written on a connection taken from the client's pool.

Each command's first argument after the name must be its key (declared in KEYS, as scripts should).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, Final

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection, ConnectionPoolInterface
from redis.exceptions import NoScriptError, ResponseError

Command = tuple[Any, ...]  # (name, key, *args)

CHUNK = 1_000
# A guard's refusal: the run no longer holds its response's lease (another worker took it over after it lapsed,
# or its key was deleted). Expected after a pause past the lease: its writes are refused by design.
LEASE_LOST = "LEASE_LOST"

# ARGV per command: "e", id, frame (an event: XADD key id f frame; the common case, packed short),
# "g", token (a guard: the key, a lease, must hold the token, else the commands after it up to the
# next guard are skipped, and only the guard is reported failed: LEASE_LOST, or the GET's own error where
# the key holds another type, a pcall, so that the other responses of the call go on), or name, number of
# args, args... . An SREM refused because its key holds another type (the open streams' key overwritten by hand,
# another application or a bug) did what it was for, the member is not listed there: not a failure (a close's
# SREM failed the close, and so every response's end on every worker until a reaper's pass replaced the key).
# Returns {index, error, ...} of the commands that failed.
SCRIPT = """
local failed, pos, skip = {}, 1, false
for i = 1, #KEYS do
  local r
  if ARGV[pos] == 'g' then
    local held = redis.pcall('GET', KEYS[i])
    skip = held ~= ARGV[pos + 1]
    if skip and type(held) == 'table' then r = held  -- the key holds another type: WRONGTYPE
    elseif skip then r = {err = 'LEASE_LOST this worker no longer holds the lease of its response'} end
    pos = pos + 2
  elseif skip then
    if ARGV[pos] == 'e' then pos = pos + 3 else pos = pos + 2 + tonumber(ARGV[pos + 1]) end
  elseif ARGV[pos] == 'e' then
    r = redis.pcall('XADD', KEYS[i], ARGV[pos + 1], 'f', ARGV[pos + 2])
    pos = pos + 3
  else
    local n = tonumber(ARGV[pos + 1])
    r = redis.pcall(ARGV[pos], KEYS[i], unpack(ARGV, pos + 2, pos + 1 + n))
    if ARGV[pos] == 'SREM' and type(r) == 'table' and r.err and string.find(r.err, 'WRONGTYPE', 1, true) == 1 then
      r = 0  -- a key of another type does not list the member either: removed, as asked
    end
    pos = pos + 2 + n
  end
  if type(r) == 'table' and r.err then
    failed[#failed + 1] = i - 1
    failed[#failed + 1] = r.err
  end
end
return failed
"""
SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int):
        return b"%d" % value
    raise TypeError(f"cannot send {type(value).__name__} to Redis")


# A command packed for the script as soon as it is made, once: its key (a RESP bulk string, for KEYS),
# its ARGV part (RESP bulk strings), how many ARGV entries that is, and its name (for tests and logs).
# A flush then only joins bytes: packing every argument of every command at flush time (a length, a
# format, a type check each) was a sixth of the worker's loop CPU per token under cProfile
# (bench/worker_ceiling.py --streams 8 --step-ms 4.6: about 80 of 502 us per token).
Packed = tuple[bytes, bytes, int, str]
KEY: Final = 0
ARGV: Final = 1
ARGC: Final = 2
NAME: Final = 3

_BULK = b"$%d\r\n%b\r\n"
# ARGV of an event: "e", then % (len(entry id), entry id, len(frame), frame)
_EVENT_ARGV = b"$1\r\ne\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"
_RPUSH_ARGV = b"$5\r\nRPUSH\r\n$1\r\n1\r\n$%d\r\n%b\r\n"
_HEADER = b"*%d\r\n$7\r\nEVALSHA\r\n$40\r\n" + SHA.encode() + b"\r\n$%d\r\n%d\r\n"


def bulk_string(value: bytes) -> bytes:
    return _BULK % (len(value), value)


def pack_event_entries(key: bytes, entries: Iterable[tuple[bytes, bytes]]) -> list[Packed]:
    """``XADD key id f frame`` for each (entry id, frame), packed."""
    head = bulk_string(key)
    return [(head, _EVENT_ARGV % (len(entry_id), entry_id, len(data), data), 3, "XADD") for entry_id, data in entries]


def event_entry(command: Packed) -> tuple[bytes, bytes] | None:
    """The stream key and entry id of a packed event (as ``pack_event_entries`` packs it); None for
    any other command (for tracing what a flush holds)."""
    if not command[ARGV].startswith(b"$1\r\ne\r\n"):
        return None
    return command[KEY].split(b"\r\n", 2)[1], command[ARGV].split(b"\r\n", 4)[3]


def event_entries(commands: Iterable[Packed]) -> list[tuple[str, str]]:
    """(stream key, entry id) of each packed event among ``commands``, as text."""
    found = [event_entry(command) for command in commands]
    return [(key.decode(), entry_id.decode()) for key, entry_id in filter(None, found)]


def pack_guard(lease_key: bytes, token: bytes) -> Packed:
    """A guard: the commands after it (up to the next guard) run only if ``lease_key`` holds ``token``."""
    return bulk_string(lease_key), b"$1\r\ng\r\n" + bulk_string(token), 2, "GUARD"


def pack_push(key: bytes, value: bytes) -> Packed:
    """``RPUSH key value``, packed (a journal's steps: once per response per flush)."""
    return bulk_string(key), _RPUSH_ARGV % (len(value), value), 3, "RPUSH"


def pack_command(command: Command) -> Packed:
    """Any command, packed: ARGV holds its name, its argument count, then its arguments."""
    name, key, args = _bytes(command[0]), _bytes(command[1]), [_bytes(arg) for arg in command[2:]]
    count = b"%d" % len(args)
    argv = b"".join([_BULK % (len(name), name), _BULK % (len(count), count), *(_BULK % (len(a), a) for a in args)])
    return bulk_string(key), argv, 2 + len(args), str(command[0])


def pack(args: list[bytes]) -> bytes:
    """One command in the Redis protocol (RESP): ``*N`` then ``$len`` + bytes per argument."""
    parts = [b"*%d\r\n" % len(args)]
    parts += [_BULK % (len(arg), arg) for arg in args]
    return b"".join(parts)


def script_calls(commands: Sequence[Packed]) -> tuple[bytes, int]:
    """The EVALSHA calls that run ``commands`` in order, packed for one write, and how many they are."""
    parts: list[bytes] = []
    for start in range(0, len(commands), CHUNK):
        chunk = commands[start : start + CHUNK]
        keys = len(chunk)
        count = b"%d" % keys
        parts.append(_HEADER % (3 + keys + sum([c[ARGC] for c in chunk]), len(count), keys))
        parts += [c[KEY] for c in chunk]
        parts += [c[ARGV] for c in chunk]
    return b"".join(parts), -(-len(commands) // CHUNK)


def failed_commands(replies: Sequence[Any]) -> dict[int, str]:
    """The error message of each failed command, by its index, from the replies of ``script_calls``.

    Raises a reply that is itself an error (NOSCRIPT, a script that could not run): its commands did not run.
    """
    errors: dict[int, str] = {}
    for number, reply in enumerate(replies):
        if isinstance(reply, Exception):
            raise reply
        for index, message in zip(reply[::2], reply[1::2], strict=True):  # {index, error, ...} pairs
            errors[number * CHUNK + index] = message.decode() if isinstance(message, bytes) else str(message)
    return errors


async def run_commands(redis: Redis, commands: Sequence[Command]) -> dict[int, str]:
    """Run ``commands`` in order in one round trip; the error message of each failed command by index.

    Raises on connection errors (then nothing or only a prefix of the commands ran).
    """
    payload, count = script_calls([pack_command(command) for command in commands])
    replies = await _send(redis, payload, count)
    if any(isinstance(r, NoScriptError) for r in replies):  # first use on this server (or flushed)
        await redis.script_load(SCRIPT)
        replies = await _send(redis, payload, count)
    return failed_commands(replies)


async def _send(redis: Redis, payload: bytes, count: int) -> list[Any]:
    """The ``count`` script calls of ``payload`` in one write; the replies in order (an error reply as
    its exception)."""
    # Typed as the pool interface: ConnectionPool's own get_connection carries no annotations.
    pool: ConnectionPoolInterface = redis.connection_pool
    connection = await pool.get_connection()
    try:
        await connection.send_packed_command(payload, check_health=False)
        return [await _reply(connection) for _ in range(count)]
    finally:  # a connection broken midway was disconnected by redis-py; the pool reconnects it
        await pool.release(connection)


async def _reply(connection: AbstractConnection) -> Any:
    try:
        return await connection.read_response(disable_decoding=True)
    except ResponseError as error:  # NOSCRIPT, or the script itself failed: the caller decides
        return error


def lease_lost(error: BaseException | str) -> bool:
    """A write refused by its guard: the run lost its response's lease (``LEASE_LOST``)."""
    return str(error).startswith(LEASE_LOST)
