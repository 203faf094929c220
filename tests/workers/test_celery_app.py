"""The worker's Celery app as it meets its broker (workers/celery_app.py), against a real redis-server."""

from __future__ import annotations

import time

import pytest
import redis as redis_lib
from kombu import Connection
from support.silent_link import SilentLink

from oss_responses.broker import TRANSPORT
from oss_responses.config import Settings
from oss_responses.workers.celery_app import broker_transport_options


def test_broker_command_gives_up_a_broker_gone_silent(silent_link: SilentLink, redis_url: str) -> None:
    # Celery's heartbeat PUBLISHes on the consumer's thread: on a connection that fell silent (a lost NAT
    # entry, no RST) it waited for good, and the worker never took a task again (the network probe).
    options = broker_transport_options(Settings(redis_url=redis_url))
    with Connection(f"redis://127.0.0.1:{silent_link.port}/0", transport=TRANSPORT,
                    transport_options=options) as connection:
        client = connection.default_channel.client
        client.publish("oss-test", "before")
        silent_link.silence()
        started = time.monotonic()
        with pytest.raises(redis_lib.TimeoutError):
            client.publish("oss-test", "after")  # waited for good
        assert time.monotonic() - started < options["socket_timeout"] + 5
