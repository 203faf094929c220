from __future__ import annotations

import redis as redis_lib

from oss_responses.eventlog.bulk import (
    CHUNK,
    SCRIPT,
    SHA,
    event_entries,
    event_entry,
    failed_commands,
    pack,
    pack_command,
    pack_event_entries,
    script_calls,
)


def run(redis: redis_lib.Redis, packed: list) -> dict[int, str]:  # type: ignore[type-arg]
    """What the event writer does with ``packed``: one write, then the failures by command index."""
    redis.script_load(SCRIPT)
    payload, count = script_calls(packed)
    connection = redis.connection_pool.get_connection()
    try:
        connection.send_packed_command([payload])
        replies = [connection.read_response() for _ in range(count)]
    finally:
        redis.connection_pool.release(connection)
    return failed_commands(replies)


def test_script_calls_run_events_and_commands_in_order_across_chunks(redis: redis_lib.Redis) -> None:
    events = pack_event_entries(b"oss:test:a", [(b"0-%d" % n, b"frame %d" % n) for n in range(1, CHUNK + 6)])
    packed = [pack_command(("RPUSH", "oss:test:j", '["feed",[1]]')), *events,
              pack_command(("EXPIRE", b"oss:test:a", 60))]

    assert run(redis, packed) == {}
    assert redis.xlen("oss:test:a") == CHUNK + 5
    assert redis.xrange("oss:test:a", count=2) == [(b"0-1", {b"f": b"frame 1"}), (b"0-2", {b"f": b"frame 2"})]
    assert redis.lrange("oss:test:j", 0, -1) == [b'["feed",[1]]']
    assert 0 < redis.ttl("oss:test:a") <= 60


def test_failed_commands_are_named_by_their_index_in_the_flush(redis: redis_lib.Redis) -> None:
    fine = pack_event_entries(b"oss:test:a", [(b"0-%d" % n, b"x") for n in range(1, CHUNK + 2)])
    stale = pack_event_entries(b"oss:test:a", [(b"0-1", b"again")])  # an id at or below the stream's last

    errors = run(redis, [*fine, *stale])

    assert list(errors) == [CHUNK + 1]
    assert "equal or smaller" in errors[CHUNK + 1]


def test_packed_commands_are_the_script_call_written_out() -> None:
    packed = [pack_command(("DEL", "oss:test:k")), *pack_event_entries(b"oss:test:s", [(b"0-1", b"f1")])]

    payload, count = script_calls(packed)

    assert count == 1
    assert payload == pack([b"EVALSHA", SHA.encode(), b"2", b"oss:test:k", b"oss:test:s",
                            b"DEL", b"0", b"e", b"0-1", b"f1"])


def test_event_entry_names_an_events_stream_and_id_only() -> None:
    (event,) = pack_event_entries(b"oss:events:resp_1", [(b"0-7", b"event: x\r\ndata: {}\n\n")])
    close = pack_command(("XADD", "oss:events:resp_1", "*", "end", "completed"))

    assert event_entry(event) == (b"oss:events:resp_1", b"0-7")
    assert event_entry(close) is None
    assert event_entries([close, event]) == [("oss:events:resp_1", "0-7")]
