"""kombu's Redis transport as this service uses it, for the API's and the workers' Celery apps.

Publishing reuses the channel's Redis client. kombu builds a new ``redis.Redis`` for every command
it sends outside a pipeline (``Channel.conn_or_acquire``), a publish included, and redis-py's client
copies its table of reply callbacks when it is built: a quarter of the CPU of the API's
``send_task``, which is one of the largest parts of accepting a response. The client is safe to
share between threads (its connections come from the channel's pool), and a new pool (after a
reconnect) gets a new client.

Consuming survives a loss of Redis. When Redis goes away under a consumer holding unacknowledged
messages (``acks_late``: every running response), kombu 5 closes the channel and tries to put those
messages back on their queue through a connection pool that the close has already torn down. The
resulting ``AttributeError`` is not among the connection errors kombu ignores there, so it escapes and
stops the worker ("Unrecoverable error"). The same happens when a task that started before the loss
is acknowledged, or rejected, on the dead channel. Neither put-back nor ack is needed for correctness: an
unacknowledged message stays in the broker's unacked hash and is redelivered after the visibility
timeout, and a redelivered task whose response already ended, or runs elsewhere under a lease, does
nothing. So this transport skips them when the channel's connection is gone, and the consumer
reconnects as Celery intends.

Consuming survives a Redis that refuses writes too. At ``maxmemory`` under ``noeviction`` Redis refuses
every command inside MULTI (kombu's ack and its reject's put-back: ``OOM command not allowed``), and a
replica promoted away or a failed snapshot refuses them as well (``READONLY``, ``MISCONF``). kombu lets
such a reply escape the consumer, which stopped the worker and every response it ran. An ack or reject
so refused leaves the message unacknowledged, as on a lost connection. A message just taken off its queue
whose entry in the unacked set was refused is run all the same: kombu dropped it with the worker (its
response then waited for the stale sweep); run, only a redelivery after this worker's death is missing,
and a response's lease, or the stale sweep, covers that.

A Redis that refuses writes refuses the consumer's BRPOP too (a pop is a write; full, Redis still allows
it, but not unable to write its append-only file or snapshot, ``MISCONF``, nor as a replica, ``READONLY``):
the reply escaped the consumer as well and stopped the worker for good, so that once Redis wrote again no
worker was left to run anything. Refused, the consumer waits ``REFUSED_POP_PAUSE_SECONDS`` and asks again.

kombu's own keys for the unacknowledged messages (``unacked`` a hash, ``unacked_index`` a sorted set,
``unacked_mutex`` a string with a TTL) may hold another type (by hand, another application, a bug). Then
its redelivery of unacknowledged messages stopped: the restore pass raised WRONGTYPE in the worker's timer
every time (a traceback in the log), or, the mutex taken for good (it never expires), never ran at all,
silently. The restore pass deletes such a key first (a TYPE-checked DEL, a WARNING naming it), at most once
a minute: what it held was no record of kombu's anyway.

A queue item that is no kombu message (not JSON, not kombu's envelope, a body its encoding cannot decode:
pushed by hand, by another application, by a bug) is dropped with an ERROR line. Its exception escaped the
consumer: it stopped the worker ("Unrecoverable error"), or, a ``KeyError``, which kombu counts among the
connection errors, had the consumer reconnect, put its running tasks back on the queue, and meet the item again.
A message whose body is no task of Celery's is Celery's to refuse (``workers/consumer.py``).

A worker told to stop while it waits for tasks stops at once (``stop_popping``). Celery's consumer sees the
stop only between two turns of its loop, a turn waits for the pending BRPOP's answer (kombu's
``brpop_timeout``, 1 s), and the channel's close reads that answer too: an idle worker took 0-1 s to stop
(0.48 s on average over six stops, measured), a deploy or a test paying it per worker. ``CLIENT UNBLOCK``
(the connection's id asked once per connection) has Redis answer the pop as timed out.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kombu.transport import redis as kombu_redis
from kombu.transport.virtual import Empty
from redis.exceptions import RedisError, ResponseError

from oss_responses.config import REDIS_SCHEMES
from oss_responses.logs import safe_url
from oss_responses.redis_refusals import DELETE_IF_OTHER_TYPE, refuses_writes, wrong_type

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)

TRANSPORT = f"{__name__}:Transport"


def queues_url(app: Celery) -> str:
    """The Redis that ``app`` sends its tasks to, as Celery resolves it: its environment variables
    (``CELERY_BROKER_WRITE_URL``, ``CELERY_BROKER_URL``) before the broker the app was built with. What
    reads or writes the queues without Celery (the API's push of a response's task, the queue depths) uses
    this, not the setting: with ``CELERY_BROKER_URL`` set in a deployment's environment, the API pushed to
    one Redis while the workers read another, and every response waited for the stale sweep."""
    return str(app.conf.broker_write_url)


class BrokerNotRedis(ValueError):
    """The broker Celery resolved is no Redis: the task queues are Redis lists, written and read without Celery
    too (the API's push, the queue depths, the worker's stop probe)."""


def check_redis_broker(app: Celery) -> None:
    """Raises :class:`BrokerNotRedis` unless the broker ``app`` reads and writes is a Redis. ``CELERY_BROKER_URL``
    (Celery's own variable, which wins over the setting) set to an AMQP broker passed every check: the API's start
    ended in a traceback, and a worker hung retrying a transport it cannot use."""
    for url in {str(app.conf.broker_read_url), str(app.conf.broker_write_url)}:
        if urlsplit(url).scheme not in REDIS_SCHEMES:
            raise BrokerNotRedis(f"the broker {safe_url(url)} is not a Redis (redis://, rediss:// or unix://): the "
                                 "task queues are Redis lists; unset CELERY_BROKER_URL or point it at a Redis")


def redis_broker_url(configured: str) -> str:
    """The Redis the service's tasks go to, where nothing else builds a Celery app: ``configured`` (the setting) as
    Celery resolves it (:func:`queues_url`); :class:`BrokerNotRedis` if that is no Redis."""
    from celery import Celery  # here: the API's and the doctor's other imports of this module need no app

    app = Celery(broker=configured, set_as_current=False)
    check_redis_broker(app)
    return queues_url(app)


# How long a consumer whose pop Redis refused waits before it pops again: one refused BRPOP a second
# while the outage lasts, not a busy loop (the reply comes at once).
REFUSED_POP_PAUSE_SECONDS = 1.0


KOMBU_KEYS_CHECK_SECONDS = 60.0
# How much of a dropped queue item its ERROR line shows.
UNREADABLE_EXCERPT_CHARS = 200


class QoS(kombu_redis.QoS):
    _keys_checked_at: float | None = None
    # The tasks the channel held when it lost its connection, told in one line then: each one's ack or
    # reject later is DEBUG (a GPU worker's 128 running responses made 128 more WARNING lines, one per task
    # as it finished, for one Redis restart). A reconnect makes a new channel.
    _told_unacked: frozenset[Any] = frozenset()
    # Tasks that finish on the lost connection before its loss was counted (their acks came first: the outage
    # probe's four running responses, four WARNING lines) are told once, the first at WARNING.
    _told_left = False

    def restore_unacked(self, client: Any = None) -> None:
        if client is None and not self._connected():
            log.warning("broker connection lost: %d unacknowledged tasks stay in the broker's unacked set "
                        "(redelivered after the visibility timeout; a redelivery of a task that ran is a no-op)",
                        len(self._delivered))
            self._told_unacked = frozenset(self._delivered)
            self._delivered.clear()
            return
        super().restore_unacked(client)  # type: ignore[no-untyped-call]  # kombu's QoS has no annotations

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        # The pass that puts back tasks unacknowledged past the visibility timeout takes a lock (a SET):
        # refused, it is left to a later pass instead of escaping the consumer.
        try:
            self._delete_overwritten_keys()
            super().restore_visible(*args, **kwargs)  # type: ignore[no-untyped-call]
        except ResponseError as exc:
            if not refuses_writes(exc):
                raise
            log.debug("the broker refused to restore unacknowledged tasks (%s): a later pass does", exc)

    def _delete_overwritten_keys(self) -> None:
        """kombu's keys of another type deleted (see the module docstring), at most once a minute."""
        now = time.monotonic()
        if self._keys_checked_at is not None and now - self._keys_checked_at < KOMBU_KEYS_CHECK_SECONDS:
            return
        self._keys_checked_at = now
        expected = {self.unacked_key: "hash", self.unacked_index_key: "zset", self.unacked_mutex_key: "string"}
        with self.channel.conn_or_acquire() as client:
            for key, kind in expected.items():
                if client.eval(DELETE_IF_OTHER_TYPE, 1, key, kind):
                    log.warning("kombu's key %s held something other than a %s (overwritten by hand, another "
                                "application or a bug), which stopped the redelivery of unacknowledged tasks: "
                                "deleted", key, kind)

    def append(self, message: Any, delivery_tag: Any) -> None:
        try:
            super().append(message, delivery_tag)  # type: ignore[no-untyped-call]
        except ResponseError as exc:
            log.warning("the broker refused to record task %s as unacknowledged (%s): it runs, but is not "
                        "redelivered should this worker die", delivery_tag, exc)
            super(kombu_redis.QoS, self).append(message, delivery_tag)  # type: ignore[no-untyped-call]  # local

    def ack(self, delivery_tag: Any) -> None:
        if not self._connected():
            self._left("broker connection lost: task %s stays unacknowledged (its redelivery is a no-op)",
                       delivery_tag)
            # Forget it locally. kombu's QoS methods have no annotations (here and below).
            super(kombu_redis.QoS, self).ack(delivery_tag)  # type: ignore[no-untyped-call]
            return
        try:
            super().ack(delivery_tag)  # type: ignore[no-untyped-call]
        except ResponseError as exc:
            self._refused("acknowledge", delivery_tag, exc)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        # A task rejected as its broker went away (a webhook whose retry could not be sent): on a dead
        # channel kombu's reject fails as its ack does, and stops the worker.
        if not self._connected():
            self._left("broker connection lost: rejected task %s stays unacknowledged (redelivered after the "
                       "visibility timeout)", delivery_tag)
            super(kombu_redis.QoS, self).ack(delivery_tag)  # type: ignore[no-untyped-call]  # forgotten locally
            return
        try:
            super().reject(delivery_tag, requeue)  # type: ignore[no-untyped-call]
        except ResponseError as exc:
            self._refused("reject", delivery_tag, exc)

    def _refused(self, what: str, delivery_tag: Any, exc: ResponseError) -> None:
        """Redis answered, but refused the write (full, read-only): the task stays in the unacked set."""
        log.warning("the broker refused to %s task %s (%s): it stays unacknowledged (redelivered after the "
                    "visibility timeout; its redelivery is a no-op)", what, delivery_tag, exc)
        super(kombu_redis.QoS, self).ack(delivery_tag)  # type: ignore[no-untyped-call]  # forgotten locally

    def _left(self, message: str, delivery_tag: Any) -> None:
        """A task finished on the lost connection: DEBUG if the connection's loss already counted it, or if an
        earlier one was told; else WARNING."""
        if delivery_tag in self._told_unacked or self._told_left:
            log.debug(message, delivery_tag)
            return
        self._told_left = True
        log.warning(message + "; the next tasks that finish on this lost connection are DEBUG lines", delivery_tag)

    def _connected(self) -> bool:
        # The channel's transport drops its client (the kombu Connection) when the connection closes.
        return self.channel.connection is not None and self.channel.connection.client is not None


class Channel(kombu_redis.Channel):
    QoS = QoS
    _sync_client: Any = None
    _pop_paused_until = 0.0  # monotonic: no BRPOP before then (Redis refused the last one)
    _pop_refused = False  # the outage is logged once, and its end once
    _pop_client_id: int | None = None  # Redis's id of the connection the BRPOPs go out on
    _pop_socket: Any = None  # that connection's socket when its id was asked: a reconnect asks again

    def _brpop_start(self, timeout: int | None = None) -> None:
        if time.monotonic() < self._pop_paused_until:
            return  # the poller asks again on its next tick
        self._identify_pop_connection()
        super()._brpop_start(timeout)  # type: ignore[no-untyped-call]

    def _identify_pop_connection(self) -> None:
        connection = self.client.connection
        if connection._sock is None or connection._sock is self._pop_socket:
            return
        try:
            self._pop_client_id = self.client.client_id()
        except ResponseError:  # CLIENT denied (an ACL, a managed Redis): a stop waits for the pop's timeout
            self._pop_client_id = None
        self._pop_socket = connection._sock
        _popping.add(self)

    def _unblock_pop(self, client_id: int) -> None:
        try:
            self._create_client().client_unblock(client_id)
        except RedisError as exc:  # Redis away: the pop ends at its timeout, as it did
            log.debug("could not end the pending pop at once: %s", exc)

    def basic_consume(self, queue: str, no_ack: bool, callback: Any, consumer_tag: str, **kwargs: Any) -> Any:
        consumed = super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)  # type: ignore[no-untyped-call]
        # kombu's own delivery callback for the queue, replaced by one that first reads the item as a message.
        self.connection._callbacks[queue] = partial(self._deliver, queue, no_ack, callback)
        return consumed

    def _deliver(self, queue: str, no_ack: bool, callback: Any, raw: Any) -> Any:
        """kombu's ``basic_consume`` callback, but an item that is no kombu message is dropped, before kombu
        records it as unacknowledged: reading it is all that fails on it, and nothing can read it later."""
        try:
            message = self.Message(raw, channel=self)  # type: ignore[no-untyped-call]  # kombu: no annotations
            if message.body is None:  # kombu takes it for an empty message, which Celery cannot log or refuse
                raise ValueError("no body")
        except Exception as exc:  # a KeyError, TypeError, ValueError...: whatever the item lacked
            _drop_unreadable(queue, raw, exc)
            return None
        if not no_ack:
            self.qos.append(message, message.delivery_tag)
        return callback(message)

    def _brpop_read(self, **options: Any) -> bool:
        try:
            taken: bool = super()._brpop_read(**options)  # type: ignore[no-untyped-call]
        except json.JSONDecodeError as exc:  # the popped item is not JSON (kombu's ``loads`` of it)
            _drop_unreadable(", ".join(self._queue_names()), exc.doc, exc)
            raise Empty() from None
        except ResponseError as exc:
            # A queue key holding another type (WRONGTYPE: set by hand, another application, a bug) fails every
            # BRPOP of this worker's queues as a refusal does: escaped, it stopped the worker ("Unrecoverable
            # error"), and every worker on that queue with it. Asked again, as for a refusal, until it is deleted.
            if not (refuses_writes(exc) or wrong_type(exc)):
                raise
            self._refuse_pops(exc)
            raise Empty() from None
        except Empty:  # answered: no task within the BRPOP's timeout
            self._pops_answered()
            raise
        self._pops_answered()
        return taken

    def _queue_names(self) -> list[str]:
        return sorted(str(queue) for queue in getattr(self, "_active_queues", []))

    def _pops_answered(self) -> None:
        if self._pop_refused:
            self._pop_refused = False
            log.warning("the broker hands out tasks again")

    def _refuse_pops(self, exc: ResponseError) -> None:
        if not self._pop_refused:
            self._pop_refused = True
            if wrong_type(exc):
                log.warning("a queue key of this worker holds something other than a list (%s; overwritten by hand, "
                            "another application or a bug): no task is taken from its queues (%s) until the key is "
                            "deleted (the tasks it held are lost; the reaper sends still-queued responses' tasks "
                            "again); asking again every %.0f s", exc, ", ".join(self._queue_names()),
                            REFUSED_POP_PAUSE_SECONDS)
            else:
                log.warning("the broker refuses to hand out tasks (%s): asking again every %.0f s until it writes "
                            "again", exc, REFUSED_POP_PAUSE_SECONDS)
        self._pop_paused_until = time.monotonic() + REFUSED_POP_PAUSE_SECONDS

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # the consumer's own client (its BRPOP): kombu manages it
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]  # kombu: no annotations
        client = self._sync_client
        if client is None or client.connection_pool is not self.pool:
            client = self._sync_client = super()._create_client()  # type: ignore[no-untyped-call]
        return client


def _drop_unreadable(queue: str, raw: Any, exc: Exception) -> None:
    excerpt = raw if isinstance(raw, str) else json.dumps(raw, default=repr)
    if len(excerpt) > UNREADABLE_EXCERPT_CHARS:
        excerpt = excerpt[:UNREADABLE_EXCERPT_CHARS] + "..."
    log.error("dropped an item of queue %s that is no task message (%s: %s): %s", queue, type(exc).__name__, exc,
              excerpt)


# The channels of this process that pop tasks, for ``stop_popping``.
_popping: weakref.WeakSet[Channel] = weakref.WeakSet()


def stop_popping() -> None:
    """Has Redis answer this process's pending BRPOPs now, as timed out: the worker was told to stop.

    Called in Celery's signal handler, on the consumer's own thread, which may hold the pool's lock where
    the signal interrupted it: the command goes from a thread of its own.
    """
    for channel in list(_popping):
        client_id = channel._pop_client_id
        if channel._in_poll and client_id is not None:
            threading.Thread(target=channel._unblock_pop, args=(client_id,), name="stop-popping", daemon=True).start()


class Transport(kombu_redis.Transport):
    Channel = Channel
