"""The worker's Redis broker transport: kombu's, with its loss of Redis made survivable.

When Redis goes away under a consumer holding unacknowledged messages (``acks_late``: every running
response), kombu 5 closes the channel and tries to put those messages back on their queue through a
connection pool that the close has already torn down. The resulting ``AttributeError`` is not among
the connection errors kombu ignores there, so it escapes and stops the worker ("Unrecoverable error").
The same happens when a task that started before the loss is acknowledged on the dead channel.

Neither put-back nor ack is needed for correctness: an unacknowledged message stays in the broker's
unacked hash and is redelivered after the visibility timeout, and a redelivered task whose response
already ended, or runs elsewhere under a lease, does nothing. So this transport skips them when the
channel's connection is gone, and the consumer reconnects as Celery intends.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)

TRANSPORT = f"{__name__}:Transport"


class QoS(kombu_redis.QoS):
    def restore_unacked(self, client: Any = None) -> None:
        if client is None and not self._connected():
            log.warning("broker connection lost: %d unacknowledged tasks stay in the broker's unacked set "
                        "(redelivered after the visibility timeout)", len(self._delivered))
            self._delivered.clear()
            return
        super().restore_unacked(client)  # type: ignore[no-untyped-call]  # kombu's QoS has no annotations

    def ack(self, delivery_tag: Any) -> None:
        if not self._connected():
            log.warning("broker connection lost: task %s stays unacknowledged (its redelivery is a no-op)",
                        delivery_tag)
            # Forget it locally. kombu's QoS methods have no annotations (here and below).
            super(kombu_redis.QoS, self).ack(delivery_tag)  # type: ignore[no-untyped-call]
            return
        super().ack(delivery_tag)  # type: ignore[no-untyped-call]

    def _connected(self) -> bool:
        # The channel's transport drops its client (the kombu Connection) when the connection closes.
        return self.channel.connection is not None and self.channel.connection.client is not None


class Channel(kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel
