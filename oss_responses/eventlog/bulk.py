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
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection, ConnectionPoolInterface
from redis.exceptions import NoScriptError, ResponseError

Command = tuple[Any, ...]  # (name, key, *args)

CHUNK = 1_000

# ARGV per command: "e", id, frame (an event: XADD key id f frame; the common case, packed short)
# or name, number of args, args... . Returns {index, error, ...} of the commands that failed.
SCRIPT = """
local failed, pos = {}, 1
for i = 1, #KEYS do
  local r
  if ARGV[pos] == 'e' then
    r = redis.pcall('XADD', KEYS[i], ARGV[pos + 1], 'f', ARGV[pos + 2])
    pos = pos + 3
  else
    local n = tonumber(ARGV[pos + 1])
    r = redis.pcall(ARGV[pos], KEYS[i], unpack(ARGV, pos + 2, pos + 1 + n))
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
_EVALSHA = b"EVALSHA"
_SHA = SHA.encode()
_EVENT = b"e"


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int):
        return b"%d" % value
    raise TypeError(f"cannot send {type(value).__name__} to Redis")


def _script_call(commands: Sequence[Command]) -> list[bytes]:
    keys: list[bytes] = []
    argv: list[bytes] = []
    for command in commands:  # once per event: indexing, not unpacking, and bytes passed as they are
        key = command[1]
        keys.append(key if key.__class__ is bytes else _bytes(key))
        if command[0] == "XADD" and len(command) == 5 and command[3] == "f":
            entry_id = command[2]
            argv += (_EVENT, entry_id if entry_id.__class__ is bytes else _bytes(entry_id), command[4])
        else:
            args = command[2:]
            argv += (_bytes(command[0]), b"%d" % len(args), *map(_bytes, args))
    return [_EVALSHA, _SHA, b"%d" % len(keys), *keys, *argv]


def pack(args: list[bytes]) -> bytes:
    """One command in the Redis protocol (RESP): ``*N`` then ``$len`` + bytes per argument."""
    parts = [b"*%d\r\n" % len(args)]
    parts += [b"$%d\r\n%b\r\n" % (len(arg), arg) for arg in args]
    return b"".join(parts)


def script_calls(commands: Sequence[Command]) -> tuple[bytes, int]:
    """The EVALSHA calls that run ``commands`` in order, packed for one write, and how many they are."""
    chunks = [commands[i : i + CHUNK] for i in range(len(commands))[::CHUNK]]
    return b"".join(pack(_script_call(chunk)) for chunk in chunks), len(chunks)


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
    payload, count = script_calls(commands)
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
