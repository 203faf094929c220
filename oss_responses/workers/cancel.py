"""Cancel: the API sets ``cancel(id)`` and publishes the id on ``CANCEL_CHANNEL``.

Every worker subscribes (on its engine loop); the one running the response aborts it. A response
cancelled while still queued is caught by the key check before it starts. A runner registers
*before* it checks the key, so a cancel published between the two is never missed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from redis.asyncio import Redis

from oss_responses import redis_keys
from oss_responses.outage_log import OutageLog
from oss_responses.stopping import cancel_and_wait
from oss_responses.workers.outage import outage

log = logging.getLogger(__name__)

FIRST_PAUSE_SECONDS = 0.5
LONGEST_PAUSE_SECONDS = 5.0

OnCancel = Callable[[], None]


async def is_cancel_requested(redis: Redis, response_id: str) -> bool:
    return bool(await redis.exists(redis_keys.cancel(response_id)))


class CancelListener:
    """Running responses by id, and the pub/sub task that triggers their cancel callbacks."""

    def __init__(self, redis: Redis, outage_log: OutageLog | None = None) -> None:
        """``outage_log``: where Redis's outages are told; a worker's, shared with its other loops that retry Redis."""
        self.redis = redis
        self._outage = outage_log or OutageLog(log, "cancel listener: Redis")
        self._running: dict[str, OnCancel] = {}
        self._task: asyncio.Task[None] | None = None
        self._catching_up: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references
        self.subscribed = asyncio.Event()
        self._pause = FIRST_PAUSE_SECONDS  # before the next re-subscription; doubled while Redis is away

    def register(self, response_id: str, on_cancel: OnCancel) -> None:
        self._running[response_id] = on_cancel

    def unregister(self, response_id: str) -> None:
        self._running.pop(response_id, None)

    def trigger(self, response_id: str) -> bool:
        on_cancel = self._running.get(response_id)
        if on_cancel is None:
            return False
        on_cancel()
        return True

    async def start(self) -> None:
        """Subscribe, and keep listening in a task (re-subscribing after a connection error)."""
        self._task = asyncio.get_running_loop().create_task(self._listen_forever())
        await self.subscribed.wait()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        for task in list(self._catching_up):
            await cancel_and_wait(task)

    async def _catch_up(self) -> None:
        """Re-subscribed: a cancel published while the subscription was down is in its flag."""
        for response_id in list(self._running):
            if await is_cancel_requested(self.redis, response_id):
                log.info("cancel of %s asked while the listener was away", response_id)
                self.trigger(response_id)

    async def _listen_forever(self) -> None:
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Redis away: told with the worker's other loops' tries (a line per try here had told a 2 s
                # restart twice, a minute's outage fifteen times); anything else once each, with its traceback.
                if outage(exc):
                    self._outage.failed(exc)
                else:
                    log.warning("cancel listener lost its subscription; re-subscribing in %.1fs", self._pause,
                                exc_info=True)
                await asyncio.sleep(self._pause)
                self._pause = min(self._pause * 2, LONGEST_PAUSE_SECONDS)

    async def _listen(self) -> None:
        async with self.redis.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(redis_keys.CANCEL_CHANNEL)
            if self.subscribed.is_set():
                await self._catch_up()
            self.subscribed.set()
            self._pause = FIRST_PAUSE_SECONDS
            self._outage.answered()
            # The worker's client retries a lost connection (context.RECONNECT): its pub/sub then reconnects
            # and re-subscribes by itself, raising nothing here, and a cancel published in between was lost
            # for good (the response ran to its end, its flag set). A reconnect catches up as ours does.
            connection = pubsub.connection
            assert connection is not None  # subscribed: connected
            connection.register_connect_callback(self._reconnected)
            try:
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        data = message["data"]
                        self.trigger(data.decode() if isinstance(data, bytes) else data)
            finally:
                # The connection goes back to the pool, for other commands: their reconnects are not ours.
                connection.deregister_connect_callback(self._reconnected)

    def _reconnected(self, connection: object) -> None:
        """redis-py re-subscribed (its callback runs first): the flags are read on another connection."""
        log.info("cancel listener reconnected; reading the cancel flags of its running responses")
        task = asyncio.get_running_loop().create_task(self._catch_up_logged())
        self._catching_up.add(task)
        task.add_done_callback(self._catching_up.discard)

    async def _catch_up_logged(self) -> None:
        try:
            await self._catch_up()
        except Exception as exc:  # Redis away again: the listener's next reconnect (or re-subscription) tries
            log.warning("cancel listener could not read the cancel flags after reconnecting (%s: %s)",
                        type(exc).__name__, exc)
