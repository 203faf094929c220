"""The service's kombu transport: a publishing channel keeps one Redis client; consuming survives Redis's
losses and refusals."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
import redis as redis_lib
from celery.worker.worker import WorkController
from kombu import Connection, Consumer, Queue
from support.servers import free_port

from oss_responses.api.services import TaskQueue
from oss_responses.broker import TRANSPORT, Channel, stop_popping
from oss_responses.workers.consumer import Consumer as ServiceConsumer


def test_channel_reuses_its_redis_client_for_commands(redis_url: str, redis: redis_lib.Redis) -> None:
    with Connection(redis_url, transport=TRANSPORT) as connection:
        channel = connection.default_channel
        assert channel._create_client() is channel._create_client()
        assert channel._create_client(asynchronous=True) is not channel._create_client()


@contextmanager
def _pending_pop(redis_url: str, redis: redis_lib.Redis) -> Iterator[Channel]:
    """A consumer's channel waiting in a BRPOP that Redis would answer in 30 s (a worker's waits 1 s)."""
    with Connection(redis_url, transport=TRANSPORT, transport_options={"polling_interval": 30}) as connection:
        channel = connection.channel()
        Consumer(channel, [Queue("responses.popped")], no_ack=True).consume()
        with pytest.raises(socket.timeout):
            connection.drain_events(timeout=0.2)
        assert redis.info("clients")["blocked_clients"] == 1
        yield channel


def _closes_at_once(channel: Channel) -> bool:
    """A worker's stop closes its consumer's channel, and the close reads the pending BRPOP's answer."""
    started = time.monotonic()
    channel.close()
    return time.monotonic() - started < 10


def test_stop_popping_ends_a_pending_pop_that_a_channel_close_waits_for(
    redis_url: str, redis: redis_lib.Redis
) -> None:
    with _pending_pop(redis_url, redis) as channel:
        stop_popping()
        assert _closes_at_once(channel)
    assert redis.info("clients")["blocked_clients"] == 0


def test_worker_stop_without_shutting_down_signal_ends_a_pending_pop(redis_url: str, redis: redis_lib.Redis) -> None:
    # ``celery control shutdown`` and SIGQUIT send no ``worker_shutting_down``; every stop of Celery's worker
    # begins with signal_consumer_close, which finds the service's consumer's close.
    consumer = ServiceConsumer.__new__(ServiceConsumer)  # its close needs none of a running consumer's state
    with _pending_pop(redis_url, redis) as channel:
        WorkController.signal_consumer_close(SimpleNamespace(consumer=consumer))
        assert _closes_at_once(channel)
    assert redis.info("clients")["blocked_clients"] == 0


def test_channel_of_a_user_denied_client_commands_takes_tasks(redis_url: str, redis: redis_lib.Redis) -> None:
    # Naming its pop's connection for stop_popping asks CLIENT ID: denied, it must not stop the consumer.
    redis.execute_command("ACL", "SETUSER", "no-client", "on", ">secret", "~*", "&*", "+@all", "-client")
    url = redis_url.replace("redis://", "redis://no-client:secret@")
    taken: list[Any] = []
    try:
        with Connection(url, transport=TRANSPORT) as connection, \
                Consumer(connection.channel(), [Queue("responses.denied")], accept=["json"],
                         callbacks=[lambda body, _: taken.append(body)]):
            connection.Producer().publish({"n": 1}, routing_key="responses.denied", serializer="json")
            connection.drain_events(timeout=5)
            stop_popping()
    finally:
        redis.execute_command("ACL", "DELUSER", "no-client")
    assert taken == [{"n": 1}]


def test_task_queue_warm_declares_its_queues_before_any_task(redis_url: str, redis: redis_lib.Redis) -> None:
    queue = TaskQueue(redis_url)
    try:
        # Names no other test sent to: kombu remembers a process's bindings once made.
        anyio.run(queue.warm, ["responses.warmed", "webhooks.warmed"])
    finally:
        queue._celery.close()
    assert redis.exists("_kombu.binding.responses.warmed", "_kombu.binding.webhooks.warmed") == 2
    assert redis.llen("responses.warmed") == 0  # declared, nothing sent


def _lost_channel(connection: Connection, *delivered: str) -> Any:
    """The connection's channel holding tasks ``delivered`` (unacknowledged), as kombu's close of a lost
    connection leaves it."""
    channel = connection.default_channel
    for tag in delivered:
        channel.qos._delivered[tag] = object()
    channel.connection.client = None
    return channel


def test_reject_on_lost_broker_connection_leaves_task_unacknowledged(redis_url: str, redis: redis_lib.Redis) -> None:
    # A webhook task whose retry could not be sent is rejected as Redis goes away; kombu's reject on the
    # closed channel raised AttributeError and stopped the worker (the webhooks probe: 2 of 8 restarts).
    with Connection(redis_url, transport=TRANSPORT) as connection:
        channel = _lost_channel(connection, "tag-1")
        channel.qos.reject("tag-1", requeue=False)  # raised AttributeError


def _warned_and_told(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    """The broker's lines: those at WARNING or above, and the DEBUG ones."""
    records = caplog.records
    return ([record.getMessage() for record in records if record.levelno >= logging.WARNING],
            [record.getMessage() for record in records if record.levelno == logging.DEBUG])


def test_ack_on_lost_broker_connection_is_told_once_with_the_loss(
    redis_url: str, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # Each running task finishing after Redis went away added a WARNING of its own to the loss's, which had
    # already counted it: a worker's 128 running responses, 129 lines for one restart.
    with Connection(redis_url, transport=TRANSPORT) as connection:
        channel = _lost_channel(connection, "tag-1", "tag-2", "tag-3")
        with caplog.at_level(logging.DEBUG, logger="oss_responses.broker"):
            channel.qos.restore_unacked()  # the channel's close
            channel.qos.ack("tag-1")
            channel.qos.reject("tag-2", requeue=False)
            channel.qos.ack("tag-9")  # not held at the loss: not counted in its line
    warned, told = _warned_and_told(caplog)
    assert len(warned) == 2, warned
    assert warned[0].startswith("broker connection lost: 3 unacknowledged tasks stay")
    assert warned[1] == ("broker connection lost: task tag-9 stays unacknowledged (its redelivery is a no-op); the "
                         "next tasks that finish on this lost connection are DEBUG lines")
    assert any("tag-1" in line for line in told) and any("tag-2" in line for line in told), told


def test_acks_on_lost_broker_connection_before_its_loss_is_counted_are_told_once(
    redis_url: str, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # Running tasks whose acks came before the channel's loss was counted made a WARNING each (the outage
    # probe's four running responses, four lines; a GPU worker's 128, 128).
    with Connection(redis_url, transport=TRANSPORT) as connection:
        channel = _lost_channel(connection, "tag-1", "tag-2", "tag-3")
        with caplog.at_level(logging.DEBUG, logger="oss_responses.broker"):
            for tag in ("tag-1", "tag-2", "tag-3"):
                channel.qos.ack(tag)
    warned, told = _warned_and_told(caplog)
    assert warned == ["broker connection lost: task tag-1 stays unacknowledged (its redelivery is a no-op); the next "
                      "tasks that finish on this lost connection are DEBUG lines"]
    assert [tag for tag in ("tag-2", "tag-3") if any(tag in line for line in told)] == ["tag-2", "tag-3"]


def test_ack_on_full_redis_leaves_task_unacknowledged(redis_url: str, redis: redis_lib.Redis) -> None:
    # Redis at maxmemory (noeviction) refuses every command inside MULTI, kombu's ack and its reject's
    # put-back among them: the OutOfMemoryError escaped the consumer and stopped the worker ("Unrecoverable
    # error"), every response it ran with it (the redislimits probe).
    with Connection(redis_url, transport=TRANSPORT) as connection:
        channel = connection.default_channel
        queue = connection.SimpleQueue("responses.full")
        queue.put({"n": 1})
        queue.put({"n": 2})
        acked, rejected = queue.get(timeout=5), queue.get(timeout=5)
        redis.config_set("maxmemory", 1)
        try:
            channel.qos.ack(acked.delivery_tag)  # raised OutOfMemoryError
            channel.qos.reject(rejected.delivery_tag, requeue=True)
        finally:
            redis.config_set("maxmemory", 0)
        for message in (acked, rejected):  # redelivered after the visibility timeout
            assert redis.hexists("unacked", message.delivery_tag)
        channel.qos._flush()
        assert not channel.qos._delivered  # forgotten by this consumer: it takes the next task
        queue.close()


def test_get_on_full_redis_delivers_the_task_it_took(redis_url: str, redis: redis_lib.Redis) -> None:
    # The consumer pops a message, then records it in the unacked set inside MULTI, which a Redis at
    # maxmemory refuses: the OutOfMemoryError stopped the worker, and the popped task was lost with it.
    with Connection(redis_url, transport=TRANSPORT) as connection:
        queue = connection.SimpleQueue("responses.full")
        queue.put({"n": 1})
        redis.config_set("maxmemory", 1)
        try:
            message = queue.get(timeout=5)  # raised OutOfMemoryError
            message.ack()
        finally:
            redis.config_set("maxmemory", 0)
        assert message.payload == {"n": 1}
        queue.close()


def test_get_on_redis_refusing_writes_waits_and_takes_task_once_it_writes(
    redis_url: str, redis: redis_lib.Redis
) -> None:
    # A Redis that refuses writes refuses the consumer's BRPOP (a pop writes): a replica's READONLY here, as
    # MISCONF when it cannot write its append-only file (the clock probe: a full disk under Redis). The
    # reply escaped the consumer and stopped the worker for good ("Unrecoverable error: ResponseError").
    with Connection(redis_url, transport=TRANSPORT) as connection:
        queue = connection.SimpleQueue("responses.refused")
        queue.put({"n": 1})
        redis.replicaof("127.0.0.1", free_port())  # a primary that is not there: writes refused, data kept
        try:
            with pytest.raises(queue.Empty):
                queue.get(timeout=1)  # raised ReadOnlyError
        finally:
            redis.replicaof("NO", "ONE")
        message = queue.get(timeout=5)
        assert message.payload == {"n": 1}
        message.ack()
        queue.close()


def test_get_from_queue_whose_key_holds_something_else_waits_and_takes_tasks_once_it_is_deleted(
    redis_url: str, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # A queue key SET to a string (by hand, another application, a bug): the BRPOP's WRONGTYPE escaped the
    # consumer and stopped the worker ("Unrecoverable error: ResponseError"), every worker on that queue.
    with Connection(redis_url, transport=TRANSPORT) as connection:
        queue = connection.SimpleQueue("responses.overwritten")
        redis.set("responses.overwritten", "not a queue")
        with pytest.raises(queue.Empty):
            queue.get(timeout=1)
        assert "holds something other than a list" in caplog.text and "responses.overwritten" in caplog.text
        redis.delete("responses.overwritten")
        queue.put({"n": 1})
        message = queue.get(timeout=5)
        assert message.payload == {"n": 1}
        message.ack()
        queue.close()


@pytest.mark.parametrize("key", ["unacked_index", "unacked_mutex"])
def test_restore_unacked_with_kombu_key_overwritten_deletes_it_and_redelivers(
    redis_url: str, redis: redis_lib.Redis, caplog: pytest.LogCaptureFixture, key: str
) -> None:
    # kombu's index of unacknowledged tasks or its restore lock made a list (by hand, another application, a
    # bug): the restore pass raised WRONGTYPE in the worker's timer every time (the index), or never ran at all
    # (the lock, which then never expires), and no unacknowledged task was redelivered.
    redis.rpush(key, "not kombu's")
    with Connection(redis_url, transport=TRANSPORT, transport_options={"visibility_timeout": 1}) as connection:
        qos = connection.default_channel.qos
        qos.restore_visible(interval=1)  # raised ResponseError (WRONGTYPE) for the index
        assert not redis.exists(key)
        assert f"kombu's key {key} held something other than" in caplog.text
        queue = connection.SimpleQueue("responses.unacked")
        queue.put({"n": 1})
        queue.get(timeout=5)  # taken, never acknowledged: its worker died
        redis.zadd("unacked_index", {tag: 0 for tag in qos._delivered})  # unacknowledged since long ago
        qos.restore_visible(interval=1)
        assert redis.llen("responses.unacked") == 1  # redelivered
        queue.close()
