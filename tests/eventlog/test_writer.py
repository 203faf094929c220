from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis as redis_lib
from redis.asyncio import Redis
from support.servers import RedisServer, start_redis
from support.silent_link import SilentLink

from oss_responses import redis_keys
from oss_responses.eventlog import EventWriteError, EventWriter, frame, write_events
from oss_responses.eventlog import writer as writer_module
from oss_responses.eventlog.bulk import NAME
from oss_responses.eventlog.pipe import RedisPipe
from oss_responses.eventlog.writer import Fence
from oss_responses.eventlog.writes import write_frames
from oss_responses.workers.journal import read_journal

pytestmark = pytest.mark.anyio


def round_trips(redis: redis_lib.Redis) -> int:
    """Commands the writer's flushes cost on the server (one EVALSHA per flush of <= 1,000 writes)."""
    stats = redis.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))


async def test_writer_sends_one_step_of_many_responses_in_one_round_trip(aredis, redis, make_events) -> None:
    writer = EventWriter(aredis, ttl_seconds=60, early_flush_seconds=60)  # however slow the step
    writer.append("warm_up", make_events(range(1)))  # loads the script on the server
    await writer.flush()
    redis.config_resetstat()
    step = asyncio.Event()

    async def response(n: int) -> None:  # each response task wakes on the same engine step
        await step.wait()
        writer.append(f"resp_{n}", make_events(range(n, n + 1)))

    tasks = [asyncio.create_task(response(n)) for n in range(50)]
    await asyncio.sleep(0)
    step.set()
    await asyncio.gather(*tasks)
    await writer.flush()
    assert round_trips(redis) == 1
    assert all(redis.xlen(redis_keys.events(f"resp_{n}")) == 1 for n in range(50))


async def test_a_long_step_ships_what_it_has_before_it_ends(aredis, redis, make_events) -> None:
    writer = EventWriter(aredis, ttl_seconds=60, early_flush_seconds=0.001)
    writer.append("warm_up", make_events(range(1)))  # connects the writer
    await writer.flush()
    writer.append("resp_a", make_events(range(1)))
    time.sleep(0.002)  # the step goes on translating, without giving the loop a turn
    writer.append("resp_b", make_events(range(1)))  # past the threshold: written from here
    deadline = time.monotonic() + 5
    while not redis.exists(redis_keys.events("resp_b")):  # Redis has it while the step still runs
        assert time.monotonic() < deadline, "the step's writes waited for the step to end"
        time.sleep(0.001)
    assert redis.xlen(redis_keys.events("resp_a")) == 1
    await writer.aclose()


async def test_writer_reconnects_after_redis_dropped_its_connection(aredis, redis, make_events) -> None:
    writer = EventWriter(aredis, ttl_seconds=60)
    writer.append("resp_a", make_events(range(1)))
    await writer.drain("resp_a")
    redis.client_kill_filter(_type="normal", skipme=True)
    await asyncio.sleep(0.1)  # the writer's loop reads the close
    writer.append("resp_b", make_events(range(1)))
    await writer.drain("resp_b")
    assert redis.xlen(redis_keys.events("resp_b")) == 1
    await writer.aclose()


async def test_writer_keeps_a_run_going_when_it_reconnects_to_the_same_redis(aredis, redis, make_events) -> None:
    writer = EventWriter(aredis, ttl_seconds=60)
    writer.fence("resp_a", Fence(redis_keys.lease("resp_a"), "w/1"))
    redis.set(redis_keys.lease("resp_a"), "w/1")
    writer.append("resp_a", make_events(range(1)))
    await writer.drain("resp_a")
    redis.client_kill_filter(_type="normal", skipme=True)  # a network blip: the server kept everything
    await asyncio.sleep(0.1)
    writer.append("resp_a", make_events(range(1, 2)))
    await writer.drain("resp_a")
    assert redis.xlen(redis_keys.events("resp_a")) == 2
    await writer.aclose()


@pytest.mark.parametrize("run_ended", [False, True])
async def test_writer_writes_nothing_of_a_run_after_redis_comes_back_from_an_older_snapshot(
    make_events, run_ended: bool
) -> None:
    # Restarted from its snapshot, Redis gave back the run's lease and its stream as they were then: the
    # run wrote on after the restored tail, a gap its takeovers could not replay (the rollback probe). A run
    # that ended here (unfenced) with a write still buffered had it sent on the next connection: the run id
    # check failed only the runs fenced then.
    server = start_redis()
    sync, client = redis_lib.Redis(port=server.port), Redis(port=server.port)
    lease = redis_keys.lease("resp_a")
    fence = Fence(lease, "w/1")
    try:
        writer = EventWriter(client, ttl_seconds=60)
        sync.set(lease, "w/1")
        writer.fence("resp_a", fence)
        writer.append("resp_a", make_events(range(2)))
        await writer.drain("resp_a")
        sync.save()
        snapshot = sync.xrange(redis_keys.events("resp_a"))
        writer.append("resp_a", make_events(range(2, 4)))  # lost with the crash
        await writer.drain("resp_a")
        server.kill()
        server.restart()
        await asyncio.sleep(0.1)  # the writer's loop reads the close: its next flush connects anew
        writer.append("resp_a", make_events(range(4, 5)))
        if run_ended:
            writer.unfence("resp_a", fence)  # the run ended before that flush
            await writer.flush()
        else:
            with pytest.raises(EventWriteError, match="restarted or failed over"):
                await writer.drain("resp_a")
        assert sync.xrange(redis_keys.events("resp_a")) == snapshot  # nothing written after its restored tail
        await writer.aclose()
    finally:
        await client.aclose()
        sync.close()
        server.stop()


async def test_writer_loads_its_script_on_a_server_that_lost_it(aredis, redis, make_events) -> None:
    redis.script_flush()
    writer = EventWriter(aredis, ttl_seconds=60)
    writer.append("resp_a", make_events(range(2)))
    await writer.drain("resp_a")
    assert redis.xlen(redis_keys.events("resp_a")) == 2
    await writer.aclose()


async def test_append_uses_sequence_numbers_as_entry_ids(aredis, redis, make_events) -> None:
    writer = EventWriter(aredis, ttl_seconds=60)
    events = make_events(range(2, 5))
    writer.append("resp_a", events)
    await writer.drain("resp_a")
    entries = redis.xrange(redis_keys.events("resp_a"))
    assert [(i, f[b"f"]) for i, f in entries] == [
        (b"0-3", frame(events[0])), (b"0-4", frame(events[1])), (b"0-5", frame(events[2]))
    ]


async def test_close_writes_end_marker_and_ttl(aredis, redis, make_events) -> None:
    writer = EventWriter(aredis, ttl_seconds=60)
    writer.append("resp_a", make_events(range(0, 2)))
    writer.close("resp_a", "completed")
    await writer.drain("resp_a")
    last_id, fields = redis.xrange(redis_keys.events("resp_a"))[-1]
    assert fields == {b"end": b"completed"}
    assert 0 < redis.ttl(redis_keys.events("resp_a")) <= 60


async def test_append_journal_pushes_one_entry_per_flush(aredis, redis) -> None:
    writer = EventWriter(aredis, ttl_seconds=60)
    writer.append_journal("resp_a", ["feed", [1, 200_000]])
    writer.append_journal("resp_a", ["feed", [3]])
    await writer.drain("resp_a")
    assert redis.lrange(redis_keys.journal("resp_a"), 0, -1) == [b'[["feed",[1,200000]],["feed",[3]]]']


async def test_journal_reads_back_every_step_as_appended(aredis, redis) -> None:
    steps = [["begin", 3], ["use_prompt", {"calc": "Calculator ü"}, 12, ["fn"]], ["feed", [1, 200_000]],
             ["feed", []], ["feed_tool_result", 'the "answer"\n', None], ["finish", "stop", None, 12, 1_700_000_000]]
    writer = EventWriter(aredis, ttl_seconds=60)
    for step in steps:
        writer.append_journal("resp_a", step)
    await writer.drain("resp_a")
    assert await read_journal(aredis, "resp_a") == steps


async def test_journal_lands_before_the_events_of_its_flush(aredis, redis, make_events, monkeypatch) -> None:
    sent: list[tuple] = []
    real = writer_module.script_calls

    def spy(commands):  # type: ignore[no-untyped-def]
        sent.extend(commands)
        return real(commands)

    monkeypatch.setattr(writer_module, "script_calls", spy)
    writer = EventWriter(aredis, ttl_seconds=60)
    writer.append("resp_a", make_events(range(0, 2)))
    writer.append_journal("resp_a", ["feed", [1]])
    await writer.drain("resp_a")
    assert [command[NAME] for command in sent] == ["RPUSH", "XADD", "XADD"]


async def test_close_deletes_journal(aredis, redis, make_events) -> None:
    writer = EventWriter(aredis, ttl_seconds=60)
    writer.append_journal("resp_a", ["start"])
    writer.append("resp_a", make_events(range(0, 1)))
    writer.close("resp_a", "completed")
    await writer.drain("resp_a")
    assert not redis.exists(redis_keys.journal("resp_a"))


async def test_writes_buffered_during_a_flush_keep_their_order(aredis, redis, make_events) -> None:
    writer = EventWriter(aredis, ttl_seconds=60)
    for n in range(300):
        writer.append("resp_a", make_events(range(n, n + 1)))
        if n % 7 == 0:
            await asyncio.sleep(0)
    await writer.flush()
    ids = [i for i, _ in redis.xrange(redis_keys.events("resp_a"))]
    assert ids == [f"0-{n + 1}".encode() for n in range(300)]


async def test_writes_buffered_while_a_flush_awaits_its_reply_go_in_one_write(aredis, redis, make_events) -> None:
    writer = EventWriter(aredis, ttl_seconds=60, early_flush_seconds=60)
    writer.append("warm_up", make_events(range(1)))  # connects and loads the script
    await writer.flush()
    redis.config_resetstat()
    redis.client_pause(200, all=False)  # Redis holds the replies of writes for 200 ms
    writer.append("resp_a", make_events(range(1)))
    await asyncio.sleep(0.02)  # that flush went out; its reply is held
    for n in range(1, 11):  # ten more engine steps meanwhile
        writer.append("resp_a", make_events(range(n, n + 1)))
        await asyncio.sleep(0.005)
    await writer.flush()
    assert round_trips(redis) == 2
    assert redis.xlen(redis_keys.events("resp_a")) == 11


async def test_every_flush_to_an_unreachable_redis_fails_its_responses(make_events) -> None:
    unreachable = Redis.from_url("redis://127.0.0.1:1")  # nothing listens there
    writer = EventWriter(unreachable, ttl_seconds=60)
    writer.append("resp_a", make_events(range(1)))
    with pytest.raises(EventWriteError):
        await writer.drain("resp_a")
    writer.append("resp_b", make_events(range(1)))  # a later flush tries again, and fails alike
    with pytest.raises(EventWriteError):
        await writer.drain("resp_b")
    await unreachable.aclose()


async def test_flush_to_unreachable_redis_logs_one_line_without_traceback(make_events, caplog) -> None:
    unreachable = Redis.from_url("redis://127.0.0.1:1")
    writer = EventWriter(unreachable, ttl_seconds=60)
    writer.append("resp_a", make_events(range(1)))
    with caplog.at_level("WARNING", logger=writer_module.__name__), pytest.raises(EventWriteError):
        await writer.drain("resp_a")
    failures = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failures) == 1 and failures[0].exc_info is None and "unreachable" in failures[0].getMessage()
    assert "Connect call failed" in failures[0].getMessage()  # what went wrong, in the line itself
    await unreachable.aclose()


async def _writer_that_wrote(client: Redis, make_events: Any, **options: Any) -> EventWriter:
    """A writer whose connection is made: resp_a's first event landed through it."""
    writer = EventWriter(client, ttl_seconds=60, **options)
    writer.append("resp_a", make_events(range(1)))
    await writer.drain("resp_a")
    return writer


async def test_writer_gives_up_a_connection_that_fell_silent(redis_url, redis, make_events) -> None:
    # A blackholed link (no RST ever): the flush awaiting its replies failed nobody, and every later
    # flush waited behind it for good while the leases went on being renewed elsewhere (the network
    # probe: every response of the worker frozen, none taken over).
    link = await SilentLink(redis.connection_pool.connection_kwargs["port"]).start()
    client = Redis(port=link.port)
    writer = await _writer_that_wrote(client, make_events, reply_seconds=0.5)
    link.silence()
    writer.append("resp_a", make_events(range(1, 2)))
    started = time.monotonic()
    with pytest.raises(EventWriteError):
        await asyncio.wait_for(writer.drain("resp_a"), 5)
    assert time.monotonic() - started < 2
    writer.append("resp_b", make_events(range(1)))  # the next flush connects again, and lands
    await asyncio.wait_for(writer.drain("resp_b"), 5)
    assert redis.xlen(redis_keys.events("resp_b")) == 1
    await writer.aclose()
    await client.aclose()
    await link.stop()


def _writer_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == writer_module.__name__
            and record.levelno >= logging.WARNING]


async def test_writer_flushes_lost_with_their_silent_connection_log_one_line(
    redis_url, redis, make_events, caplog
) -> None:
    # Redis frozen (SIGSTOP) under a streaming response: its writes went out in early flushes on the silent
    # connection, and each one failing with it when it was given up logged a line of its own (213 lines in one
    # 20 s freeze of one response at 40 tokens/s, measured).
    link = await SilentLink(redis.connection_pool.connection_kwargs["port"]).start()
    client = Redis(port=link.port)
    writer = await _writer_that_wrote(client, make_events, early_flush_seconds=0.01, reply_seconds=0.5)
    link.silence()
    for number in range(1, 8):  # each append 20 ms after its batch started ships it: an early flush
        writer.append("resp_a", make_events(range(number, number + 1)))
        await asyncio.sleep(0.02)
    caplog.clear()
    with pytest.raises(EventWriteError):
        await asyncio.wait_for(writer.drain("resp_a"), 5)
    lines = [record.getMessage() for record in _writer_lines(caplog)]
    assert len([line for line in lines if "no reply within 0.5s" in line]) == 1, lines
    await writer.aclose()
    await client.aclose()
    await link.stop()


@pytest.fixture
async def own_redis() -> AsyncIterator[tuple[RedisServer, Redis]]:
    """A redis-server of the test's own, which it freezes or kills, and a client of it."""
    server = start_redis()
    client = Redis(port=server.port)
    yield server, client
    server.process.send_signal(signal.SIGCONT)  # a frozen server would not stop
    await client.aclose()
    server.stop()


async def test_log_frozen_redis_as_one_outage_without_error(own_redis, make_events, caplog) -> None:
    # Frozen (SIGSTOP: it answers nothing and closes nothing) under two responses, Redis cost the writer three
    # ERROR lines and one more per response: the connection given up, the flush failed, each write failed.
    server, client = own_redis
    writer = await _writer_that_wrote(client, make_events, reply_seconds=0.5)
    caplog.set_level(logging.DEBUG, logger=writer_module.__name__)
    server.process.send_signal(signal.SIGSTOP)
    writer.append("resp_a", make_events(range(1, 2)))
    writer.append("resp_b", make_events(range(1)))
    with pytest.raises(EventWriteError):
        await asyncio.wait_for(writer.drain("resp_a"), 5)
    server.process.send_signal(signal.SIGCONT)
    writer.append("resp_c", make_events(range(1)))
    await asyncio.wait_for(writer.drain("resp_c"), 5)
    lines = _writer_lines(caplog)
    assert [record.levelname for record in lines] == ["WARNING", "WARNING"], [r.getMessage() for r in lines]
    assert "unreachable (PipeBroken" in lines[0].getMessage() and "no reply within 0.5s" in lines[0].getMessage()
    assert "answers again" in lines[1].getMessage()
    assert [record for record in lines if record.exc_info] == []
    await writer.aclose()


async def test_count_frozen_redis_outage_from_its_unanswered_flush(own_redis, make_events, caplog) -> None:
    # Frozen, Redis fails no try until the writer gives its flush up: counted from that failure, a 2.5 s freeze
    # ended "after 0.5 s" (a 12 s one under a worker's 10 s limit, "after 2.0 s").
    server, client = own_redis
    writer = await _writer_that_wrote(client, make_events, reply_seconds=2.0)
    caplog.set_level(logging.WARNING, logger=writer_module.__name__)
    server.process.send_signal(signal.SIGSTOP)
    frozen = time.monotonic()
    writer.append("resp_a", make_events(range(1, 2)))
    with pytest.raises(EventWriteError):
        await asyncio.wait_for(writer.drain("resp_a"), 5)
    await asyncio.sleep(frozen + 2.5 - time.monotonic())
    server.process.send_signal(signal.SIGCONT)
    writer.append("resp_b", make_events(range(1)))
    await asyncio.wait_for(writer.drain("resp_b"), 5)
    end = _writer_lines(caplog)[-1].getMessage()
    assert end.startswith("event writer: Redis answers again after "), end
    assert float(end.split(" after ")[1].split(" s ")[0]) >= 2.4, end
    await writer.aclose()


async def test_log_killed_redis_as_one_outage_without_error(own_redis, make_events, caplog) -> None:
    # Killed and started again under two responses, Redis cost the writer an ERROR line for the flush (or the
    # connect) and one more per response.
    server, client = own_redis
    writer = await _writer_that_wrote(client, make_events, reply_seconds=0.5)
    caplog.set_level(logging.DEBUG, logger=writer_module.__name__)
    server.kill()
    writer.append("resp_a", make_events(range(1, 2)))
    writer.append("resp_b", make_events(range(1)))
    with pytest.raises(EventWriteError):
        await asyncio.wait_for(writer.drain("resp_a"), 5)
    writer.append("resp_c", make_events(range(1)))  # the next flush fails too: one more try, no line
    with pytest.raises(EventWriteError):
        await asyncio.wait_for(writer.drain("resp_c"), 5)
    server.restart()
    writer.append("resp_d", make_events(range(1)))
    await asyncio.wait_for(writer.drain("resp_d"), 5)
    lines = _writer_lines(caplog)
    assert [record.levelname for record in lines] == ["WARNING", "WARNING"], [r.getMessage() for r in lines]
    assert "unreachable" in lines[0].getMessage() and "answers again" in lines[1].getMessage()
    assert [record for record in lines if record.exc_info] == []
    await writer.aclose()


async def test_writer_writes_nothing_after_a_lost_flush_of_the_same_run(redis_url, redis, make_events) -> None:
    # Buffered while a flush awaited its replies on a connection that then died, a run's next events
    # went out on the new connection after the lost ones: a gap in its stream (1 missing, 2 there) and
    # its journal, which its takeovers could not replay (the response failed worker_lost).
    link = await SilentLink(redis.connection_pool.connection_kwargs["port"]).start()
    client = Redis(port=link.port)
    writer = EventWriter(client, ttl_seconds=60, reply_seconds=0.5)
    writer.fence("resp_a", Fence(redis_keys.lease("resp_a"), "w/1"))
    redis.set(redis_keys.lease("resp_a"), "w/1")
    writer.append("resp_a", make_events(range(1)))
    await writer.drain("resp_a")
    link.silence()
    writer.append("resp_a", make_events(range(1, 2)))  # written: lost
    await asyncio.sleep(0.05)
    writer.append("resp_a", make_events(range(2, 3)))  # buffered behind it
    with pytest.raises(EventWriteError):
        await asyncio.wait_for(writer.drain("resp_a"), 5)
    await writer.flush()
    assert [entry_id for entry_id, _ in redis.xrange(redis_keys.events("resp_a"))] == [b"0-1"]
    await writer.aclose()
    await client.aclose()
    await link.stop()


async def test_writer_writes_nothing_of_a_failed_run_that_ended_while_it_reconnected(
    redis_url, redis, make_events, monkeypatch
) -> None:
    # The run learnt its flush was lost and ended (``let_go`` unfences it) while the writer was still connecting
    # for what it had buffered behind that flush (a slow connect: TLS, a failover's address): its fence gone, the
    # batch was no longer its run's, and landed after the lost flush, a gap (0 there, 1 lost, 2 there). The run
    # unfences with a Fence equal to its own, not the same object (``Run.fence`` builds one at each call): matched
    # by identity, Redis frozen 13 s under two responses of a worker left a stream 0..50 then 410, its takeovers'
    # writes refused (XADD id not above the top) until the response failed, its output "not valid harmony".
    link = await SilentLink(redis.connection_pool.connection_kwargs["port"]).start()
    gate = asyncio.Event()
    gate.set()

    class SlowPipe(RedisPipe):
        @classmethod
        async def open(cls, client, setup):  # type: ignore[no-untyped-def]
            await gate.wait()
            return await super().open(client, setup)

    monkeypatch.setattr(writer_module, "RedisPipe", SlowPipe)
    client = Redis(port=link.port)
    writer = EventWriter(client, ttl_seconds=60, reply_seconds=0.5)
    fence = Fence(redis_keys.lease("resp_a"), "w/1")
    writer.fence("resp_a", fence)
    redis.set(redis_keys.lease("resp_a"), "w/1")
    writer.append("resp_a", make_events(range(1)))
    await writer.drain("resp_a")
    gate.clear()
    link.silence()
    writer.append("resp_a", make_events(range(1, 2)))  # written: lost
    await asyncio.sleep(0.05)
    writer.append("resp_a", make_events(range(2, 3)))  # buffered behind it, then connecting
    await asyncio.sleep(0.8)  # the lost flush given up
    with pytest.raises(EventWriteError):
        writer.append("resp_a", make_events(range(3, 4)))
    writer.unfence("resp_a", Fence(fence.lease_key, fence.token))  # left for a takeover: the run ended
    gate.set()
    await asyncio.wait_for(writer.flush(), 5)
    assert [entry_id for entry_id, _ in redis.xrange(redis_keys.events("resp_a"))] == [b"0-1"]
    await writer.aclose()
    await client.aclose()
    await link.stop()


async def test_writer_gives_up_a_connect_that_is_never_answered(make_events) -> None:
    # A server that accepts and never answers (a load balancer whose backend is gone): the greeting
    # awaited forever, the batch with it.
    server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
    client = Redis(port=server.sockets[0].getsockname()[1])
    writer = EventWriter(client, ttl_seconds=60, reply_seconds=0.5)
    writer.append("resp_a", make_events(range(1)))
    with pytest.raises(EventWriteError):
        await asyncio.wait_for(writer.drain("resp_a"), 5)
    await client.aclose()
    server.close()


async def test_appends_without_events_leave_the_writer_working(aredis, redis, make_events) -> None:
    writer = EventWriter(aredis, ttl_seconds=60, early_flush_seconds=0)  # every later append flushes early
    writer.append("warm_up", make_events(range(1)))
    await writer.flush()
    writer.append("resp_a", [])  # a token that made no event
    writer.append("resp_a", [])
    await writer.flush()
    writer.append("resp_a", make_events(range(1)))
    await writer.drain("resp_a")
    assert redis.xlen(redis_keys.events("resp_a")) == 1
    await writer.aclose()


async def test_drain_raises_when_a_write_failed(aredis, make_events) -> None:
    writer = EventWriter(aredis, ttl_seconds=60)
    writer.append("resp_a", make_events(range(5, 6)))
    writer.append("resp_a", make_events(range(3, 4)))  # id below the stream's top: XADD fails
    writer.append("resp_b", make_events(range(0, 1)))
    with pytest.raises(EventWriteError):
        await writer.drain("resp_a")
    with pytest.raises(EventWriteError):
        writer.append("resp_a", make_events(range(6, 7)))
    await writer.drain("resp_b")


async def test_write_events_writes_and_closes_in_one_call(aredis, redis: redis_lib.Redis, make_events) -> None:
    await write_events(aredis, "resp_a", make_events(range(0, 2)), close="cancelled", ttl_seconds=60)
    entries = redis.xrange(redis_keys.events("resp_a"))
    assert [i for i, _ in entries[:2]] == [b"0-1", b"0-2"]
    assert entries[-1][1] == {b"end": b"cancelled"}
    assert redis.ttl(redis_keys.events("resp_a")) > 0


async def test_write_frames_stores_the_given_bytes_at_their_sequence_numbers(aredis, redis: redis_lib.Redis) -> None:
    framed = [(3, b"event: a\ndata: {}\n\n"), (4, b"event: b\ndata: {}\n\n")]
    await write_frames(aredis, "resp_a", framed)
    entries = redis.xrange(redis_keys.events("resp_a"))
    assert entries == [(b"0-4", {b"f": framed[0][1]}), (b"0-5", {b"f": framed[1][1]})]


async def test_fenced_writes_land_only_while_the_lease_holds_the_runs_token(aredis, redis, make_events) -> None:
    lease = redis_keys.lease("resp_a")
    redis.set(lease, "w2/run")  # another run took the response over
    stale, current = EventWriter(aredis, ttl_seconds=60), EventWriter(aredis, ttl_seconds=60)
    stale.fence("resp_a", Fence(lease, "w1/run"))
    current.fence("resp_a", Fence(lease, "w2/run"))
    current.append_journal("resp_a", ["feed", [1]])
    current.append("resp_a", make_events(range(0, 1)))
    await current.drain("resp_a")
    stale.append_journal("resp_a", ["feed", [2]])
    stale.append("resp_a", make_events(range(1, 3)))
    with pytest.raises(EventWriteError, match="lease"):
        await stale.drain("resp_a")
    assert redis.lrange(redis_keys.journal("resp_a"), 0, -1) == [b'[["feed",[1]]]']
    assert redis.xlen(redis_keys.events("resp_a")) == 1
    await stale.aclose()
    await current.aclose()


@pytest.mark.parametrize("held", [True, False])
async def test_fence_guards_every_script_call_of_a_long_flush(aredis, redis, make_events, held: bool) -> None:
    lease = redis_keys.lease("resp_a")
    if held:
        redis.set(lease, "w1/run")
    writer = EventWriter(aredis, ttl_seconds=60, early_flush_seconds=60)
    writer.append("warm_up", make_events(range(1)))  # others' writes in the same flush
    writer.fence("resp_a", Fence(lease, "w1/run"))
    writer.append("resp_a", make_events(range(0, 2_500)))  # three script calls
    writer.append("resp_b", make_events(range(0, 1)))  # unfenced: lands whatever resp_a's guard says
    await writer.flush()
    assert redis.xlen(redis_keys.events("resp_a")) == (2_500 if held else 0)
    assert redis.xlen(redis_keys.events("resp_b")) == 1
    await writer.aclose()


async def test_failed_write_of_an_ended_run_does_not_fail_the_next_run(aredis, redis, make_events) -> None:
    lease = redis_keys.lease("resp_a")
    redis.set(lease, "w1/second")
    writer = EventWriter(aredis, ttl_seconds=60)
    first, second = Fence(lease, "w1/first"), Fence(lease, "w1/second")
    writer.fence("resp_a", first)
    writer.append("resp_a", make_events(range(0, 1)))  # the first run's last write: its lease is gone
    writer.unfence("resp_a", first)
    writer.fence("resp_a", second)
    writer.append("resp_a", make_events(range(0, 2)))
    await writer.drain("resp_a")
    assert [i for i, _ in redis.xrange(redis_keys.events("resp_a"))] == [b"0-1", b"0-2"]
    await writer.aclose()


async def test_lease_key_holding_another_type_fails_its_response_alone(aredis, redis, make_events, caplog) -> None:
    """A lease key replaced by a list (by hand, another application, a bug): the guard's GET raised WRONGTYPE,
    which failed the whole script call, every response of the flush with it (up to 1,000 commands), and the
    writer's connection was given up, failing the flushes after it too."""
    for response_id in ("resp_a", "resp_b"):
        redis.set(redis_keys.lease(response_id), f"w1/{response_id}")
    writer = EventWriter(aredis, ttl_seconds=60, early_flush_seconds=60)
    for response_id in ("resp_a", "resp_b"):
        writer.fence(response_id, Fence(redis_keys.lease(response_id), f"w1/{response_id}"))
    redis.delete(redis_keys.lease("resp_a"))
    redis.rpush(redis_keys.lease("resp_a"), "not a lease")
    for response_id in ("resp_a", "resp_b"):  # one flush
        writer.append_journal(response_id, ["feed", [1]])
        writer.append(response_id, make_events(range(0, 2)))
    await writer.flush()
    with pytest.raises(EventWriteError, match="WRONGTYPE"):
        await writer.drain("resp_a")
    await writer.drain("resp_b")
    assert not redis.exists(redis_keys.events("resp_a"), redis_keys.journal("resp_a"))
    assert redis.xlen(redis_keys.events("resp_b")) == 2 and redis.llen(redis_keys.journal("resp_b")) == 1
    writer.append("resp_b", make_events(range(2, 3)))  # the next flush goes on
    await writer.drain("resp_b")
    assert redis.xlen(redis_keys.events("resp_b")) == 3
    assert not [record for record in caplog.records if record.exc_info]
    await writer.aclose()
