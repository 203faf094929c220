"""API side of the event log: multiplexed blocking reads per process, relayed to many clients.

An :class:`EventHub` reads every stream that has subscribers with ``XREAD COUNT n BLOCK ms STREAMS
k1 k2 ... id1 id2 ...``: two reader tasks, each with a dedicated Redis connection (a lane: the busy
streams', the quiet ones'), and puts each read's entries (one shared list per stream) on the
subscribers' queues.

A subscription:
1. catches up from history with XRANGE pages (the first page also tells a missing stream: 404);
2. attaches to the hub with the id it has seen. A stream new to the hub is read from exactly that id,
   so nothing falls between history and live. If the hub already reads the stream from further on,
   the subscriber catches up again with XRANGE; entries it sees twice are dropped by id;
3. follows live batches until the end marker (field ``end``), or a client's stream until the response's
   terminal event, then detaches.
A client's stream (``open(client_stream=True)``: an SSE relay, a WebSocket lane) also gets a keepalive event
(``frames.keepalive_frame``) before it goes ``heartbeat_seconds`` without one or a batch, as a proxy's idle
timeout set from that interval expects: one timer for the process, not one per stream, ticking
``HEARTBEAT_TICKS`` times per interval, so that a stream's first one comes 3/4 to 1 interval after its last
batch (the timer reads the stream's last entry time: nothing per event), then one per interval.
A chunked client stream may give a ``sink`` (its connection): a read whose frames find the stream's
iteration waiting, with nothing queued, is written to it from the dispatch (``_hand_over``), the
iteration not woken; what the sink refuses is queued as for any subscriber.
``end_client_streams`` ends every one of them (:class:`EventHubStopped`) at once: the API calls it when
told to stop, since its server waits for open connections before the app shuts down, and a client can
resume a stream elsewhere. Other
subscriptions (a plain request waiting for its response's end) go on until ``stop``.
A subscriber that falls ``max_pending_batches`` behind is detached and goes back to step 1 from its
own cursor, so a slow client costs Redis reads, not unbounded memory.

Redis going away: the reader retries its read, and history reads retry for a while (``outage_seconds``,
``history.py``), so followers carry on once Redis is back (with AOF nothing was lost). After a failed read the
reader checks that the streams it follows survived it (``survival.py``): one that was lost with Redis's data,
or came back from an earlier state, loses its subscribers (:class:`StreamLost`, :class:`StreamRewound`)
instead of leaving them waiting for events that will never come. Only an outage is retried so (a connection
error or timeout, or Redis loading its data: ``OUTAGE``). A read that Redis refuses otherwise names the key to
blame when one of the followed keys holds something other than a stream (WRONGTYPE: a value left there by hand
or by a bug): that stream's followers get :class:`StreamOverwritten` and the lane reads on without it. A
refusal that no key explains raises, to the supervisor, rather than stalling the lane unseen. A history read
refused so (a new subscriber's first page, a follower catching up) raises :class:`StreamOverwritten` to its
subscriber alike; ``open`` replays the archived log instead when SQL holds one, as for a stream Redis lost.

A reader (or the heartbeat timer) that raises anything but a failed read is started again
(``supervision.py``); meanwhile every follower is detached, as one that fell behind is, and reads on from
history after its own cursor (a read's entries may have moved a stream's cursor without reaching every
subscriber): nothing lost, nothing twice (``take_frames`` drops what it had).

Two reads, two lanes (``lane.py``): a stream starts in the busy lane, read again after each read that
found entries; once it has had no entry for ``quiet_after_seconds`` it moves to the quiet lane, whose
read stays blocked until one of its streams gets an entry, and that stream moves back. A read names
every stream of its lane and Redis pays for each name, so streams that wait (queued responses, long
tool calls) no longer weigh on every read of the busy ones. A stream is in at most one read on its
way: it moves to the quiet lane only between two busy reads, and back only once the quiet read that
found it returned. Subscribing to a new stream wakes the busy read through its wake stream.
Races with the readers are settled by object identity: a read's entries are dispatched only to the
very stream record the read was issued for.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from functools import partial

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from oss_responses import redis_keys
from oss_responses.eventlog import survival
from oss_responses.eventlog.entries import ARCHIVED, Entry, EntryId, as_entries, cursor_after, parse_id, take_frames
from oss_responses.eventlog.following import FollowedStream, Sink, Subscriber, entry
from oss_responses.eventlog.frames import frame_type, is_terminal, keepalive_frame
from oss_responses.eventlog.history import ArchiveReader, History, pages_as_frames, raising
from oss_responses.eventlog.lane import ReadLane
from oss_responses.eventlog.losses import EventHubStopped, StreamLost, StreamNotFound, StreamOverwritten, StreamRewound
from oss_responses.eventlog.rewinds import Span, mark_read_rewound
from oss_responses.eventlog.supervision import Supervisor
from oss_responses.outage_log import OutageLog
from oss_responses.redis_pool import PatientPool
from oss_responses.stopping import cancel_and_wait

log = logging.getLogger(__name__)

# A failed read that is Redis away or not ready (a restart, a failover, a broken connection, its data loading:
# BusyLoadingError is a ConnectionError): read again. OSError covers the lane's own connection (PipeBroken,
# a refused connect, asyncio's timeout of a silent network).
OUTAGE: tuple[type[Exception], ...] = (OSError, RedisConnectionError, RedisTimeoutError)

# The heartbeat timer's ticks per heartbeat_seconds: a stream gets its keep-alive on the last tick before it
# would be quiet for the whole interval, 1/HEARTBEAT_TICKS of it early at most.
HEARTBEAT_TICKS = 4


def _tells_the_end(sub: Subscriber, frames: list[bytes]) -> bool:
    """A client's stream ends with its response's terminal event, not at the end marker: the worker writes that
    marker only once it saved the response, retrying while the database is down (``save_retry_seconds``), and
    the client, told the response's end, would wait that long on an open stream (keepalives after
    ``response.completed``, where OpenAI closes it), and have it cancelled if it closed it. A plain request
    waiting for the end reads SQL next: it waits for the marker."""
    return sub.client_stream and bool(frames) and is_terminal(frames[-1])


class EventHub:
    """One per API process: ``start()``, then ``subscribe``/``open`` any number of times, ``stop()``."""

    def __init__(
        self,
        redis_url: str,
        *,
        block_ms: int = 5_000,
        count: int = 1_000,
        max_pending_batches: int = 1_000,
        side_connections: int = 16,
        outage_seconds: float = 30.0,
        archive: ArchiveReader | None = None,
        heartbeat_seconds: float = 15.0,
        quiet_after_seconds: float = 2.0,
        rewound_ttl_seconds: int = 86_400,
    ) -> None:
        self._heartbeat_seconds = heartbeat_seconds
        self._rewound_ttl = rewound_ttl_seconds  # of the marks it writes: the event TTL, as a takeover's
        self._clients_ended = False  # end_client_streams was called: no client's stream follows live
        self._stopped = False
        self._redis_url = redis_url
        self._block_ms = block_ms
        self._max_pending = max_pending_batches
        self._side_connections = side_connections
        self._recheck = False  # a read failed: check that the followed streams survived it
        self._outage = OutageLog(log, "event hub: Redis")  # both lanes' failed reads, told once together
        self._quiet_after = quiet_after_seconds
        self._next_quiet_check = 0.0
        hub_id = uuid.uuid4().hex
        self._busy_lane = ReadLane(redis_keys.hub_wake(hub_id), lambda: self._side_client,
                                   count=count, block_ms=block_ms)
        self._quiet_lane = ReadLane(redis_keys.hub_wake(f"{hub_id}-quiet"), lambda: self._side_client,
                                    count=count, block_ms=block_ms)
        self._streams: dict[str, FollowedStream] = {}  # every followed stream, each in one of the two below
        self._busy: dict[str, FollowedStream] = {}
        self._quiet: dict[str, FollowedStream] = {}
        self._reader_tasks: list[asyncio.Task[None]] = []
        self._supervisor = Supervisor()
        self._history = History(lambda: self._side_client, count=count, outage_seconds=outage_seconds,
                                archive=archive)
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._side: Redis | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        # Bounded and blocking: a burst of new subscribers queues for a connection, never fails.
        pool = PatientPool.from_url(self._redis_url, max_connections=self._side_connections, timeout=30)
        self._side = Redis(connection_pool=pool)
        await self._busy_lane.connected()  # Redis answers, or the API does not start
        self._reader_tasks = [
            asyncio.create_task(self._supervisor.run("busy lane's reader", partial(
                self._read_forever, self._busy_lane, self._busy), self._resync), name="event-hub-reader"),
            asyncio.create_task(self._supervisor.run("quiet lane's reader", partial(
                self._read_forever, self._quiet_lane, self._quiet), self._resync), name="event-hub-quiet-reader"),
        ]
        self._heartbeat_task = asyncio.create_task(
            self._supervisor.run("heartbeat timer", self._beat_forever), name="event-hub-heartbeat"
        )

    async def stop(self) -> None:
        for task in self._reader_tasks:
            await cancel_and_wait(task)
        self._reader_tasks = []
        if self._heartbeat_task is not None:
            await cancel_and_wait(self._heartbeat_task)
            self._heartbeat_task = None
        self._stopped = True
        self._end_subscriptions(lambda sub: True)
        if self._side is not None:
            for lane in (self._busy_lane, self._quiet_lane):
                await lane.stop()
            await self._side.aclose()

    def failing(self) -> str | None:
        """What keeps failing: a reader (or the timer) that raised again and again of late (for ``/readyz``);
        None when nothing does."""
        return self._supervisor.failing()

    def end_client_streams(self) -> None:
        """Every client's stream, live or still reading history, ends with :class:`EventHubStopped`."""
        self._clients_ended = True
        self._end_subscriptions(lambda sub: sub.client_stream)

    def _end_subscriptions(self, which: Callable[[Subscriber], bool]) -> None:
        for key, stream in list(self._streams.items()):
            ending = {sub for sub in stream.subscribers if which(sub)}
            for sub in ending:
                sub.stopped = True
                sub.wake()
            stream.subscribers -= ending
            if not stream.subscribers:
                self._forget(key)

    # --- public interface ----------------------------------------------------------------------
    def subscribe(self, response_id: str, *, after: int | None = None, history: bool = True) -> AsyncIterator[bytes]:
        """Frames after sequence number ``after`` (all with None), in order, until the end marker.

        Lazy: a missing stream raises :class:`StreamNotFound` on the first iteration (an overwritten one
        :class:`StreamOverwritten`). ``history=False``:
        the caller itself just wrote the stream up to event ``after`` (an accept's opening events), so
        the subscription goes live from there without a first history read (nor its 404 check).
        """
        cursor = cursor_after(after)
        # Without history the caller wrote the log up to ``after``: it reaches at least that far.
        first: tuple[list[Entry], EntryId] | None = None if history else ([], cursor)
        return self._frames(response_id, cursor, first, chunked=False, client_stream=False)

    async def open(
        self,
        response_id: str,
        *,
        after: int | None = None,
        chunked: bool = False,
        history: bool = True,
        client_stream: bool = False,
        sink: Sink | None = None,
    ) -> AsyncIterator[bytes]:
        """Like :meth:`subscribe`, but raises :class:`StreamNotFound` here, before any byte is sent (a stream
        whose key holds something else, with no archived log to replay, is :class:`StreamOverwritten`: told on
        the first iteration, as its followers are told).

        With ``chunked``, each item is the frames of one read joined (fewer socket writes). A
        ``client_stream`` ends at :meth:`end_client_streams`, and gets a keepalive event when its stream was
        quiet for ``heartbeat_seconds`` or more. A chunked stream's ``sink`` (its client's
        connection) gets the frames of a read itself, joined, when they find the iteration waiting for them
        with nothing queued: they never come out of the iterator (:class:`Subscriber`).
        """
        cursor = cursor_after(after)
        if not history:
            return self._frames(response_id, cursor, ([], cursor), chunked=chunked, client_stream=client_stream,
                                sink=sink)
        try:
            first = await self._history.first_page(redis_keys.events(response_id), cursor, response_id)
        except StreamRewound as rewound:  # told in the iteration, as its followers are
            return raising(rewound)
        except StreamNotFound as missing:
            # Redis lost the stream (restarted without its data, or flushed), or its key was overwritten,
            # while SQL still holds its archived log, the same bytes: those are replayed, as the tombstone
            # would have led to them.
            pages = await self._history.archive_alone(response_id, cursor, chunked)
            if pages is None:
                if isinstance(missing, StreamLost):  # overwritten: told in the iteration, as its followers are
                    return raising(missing)
                raise
            return pages_as_frames(pages, chunked)
        return self._frames(response_id, cursor, first, chunked=chunked, client_stream=client_stream, sink=sink)

    async def last_sequence(self, response_id: str) -> int | None:
        """Sequence number of the stream's last event (None: no event yet); StreamNotFound if none."""
        entries = as_entries(await self._side_client.xrevrange(redis_keys.events(response_id), count=2))
        if not entries:
            raise StreamNotFound(response_id)
        for entry_id, fields in entries:
            if b"f" in fields:
                return parse_id(entry_id)[1] - 1
            if ARCHIVED in fields:
                last = int(fields[ARCHIVED])
                return None if last < 0 else last
        return None

    async def last_event(self, response_id: str) -> tuple[int, str] | None:
        """The sequence number and type of the last event a live stream holds (None: no stream, no
        event, or ended)."""
        entries = as_entries(await self._side_client.xrevrange(redis_keys.events(response_id), count=1))
        for entry_id, fields in entries:
            if (event_type := frame_type(fields.get(b"f", b""))) is not None:
                return parse_id(entry_id)[1] - 1, event_type
        return None

    @property
    def stream_count(self) -> int:
        """Streams the reader follows now (for tests and metrics)."""
        return len(self._streams)

    @property
    def quiet_count(self) -> int:
        """Followed streams in the quiet lane: no entry for ``quiet_after_seconds`` (for tests and metrics)."""
        return len(self._quiet)

    def subscriber_count(self, response_id: str) -> int:
        """Live subscribers of this response's stream in this process (for tests and metrics)."""
        stream = self._streams.get(redis_keys.events(response_id))
        return 0 if stream is None else len(stream.subscribers)

    # --- one subscription -----------------------------------------------------------------------
    async def _frames(
        self, response_id: str, cursor: EntryId, first: tuple[list[Entry], EntryId] | None, *, chunked: bool,
        client_stream: bool, sink: Sink | None = None,
    ) -> AsyncIterator[bytes]:
        """``first``: the first history page and the log's last entry id when it was read."""
        if first is None:
            first = await self._history.first_page(redis_keys.events(response_id), cursor, response_id)
        page, tail = first
        sub = Subscriber(client_stream=client_stream, sink=sink if chunked else None)
        follow = self._follow(response_id, cursor, page, tail, sub, chunked)
        # Frames once sent are not held while the subscriber waits (an idle stream would keep its last
        # read, ~2-4 KB, for as long as it is open): hence the references dropped here, in _follow and in _live.
        del page, first
        async for frames in follow:
            if chunked:
                yield b"".join(frames)
            else:
                for data in frames:
                    yield data
                data = b""
            frames = []

    async def _follow(
        self, response_id: str, cursor: EntryId, page: list[Entry], tail: EntryId, sub: Subscriber, joined: bool
    ) -> AsyncIterator[list[bytes]]:
        """Lists of frames (a heartbeat: a keepalive event). ``tail``: an entry id the log had reached.
        ``joined``: the archive's pages may come as one bytes each (the frames are joined anyway)."""
        key = redis_keys.events(response_id)
        try:
            while True:
                frames, cursor, end = take_frames(page, cursor)
                more_history = len(page) == self._history.count
                page = []
                told = _tells_the_end(sub, frames)
                if frames:
                    yield frames
                del frames
                if told:
                    return
                if end is not None:
                    for rest in await self._history.rest(response_id, cursor, end, joined):
                        yield rest
                    return
                if more_history:
                    page = await self._history.page(key, cursor)
                    continue
                if self._stopped or (sub.client_stream and self._clients_ended):
                    raise EventHubStopped("the event hub stopped")
                if not sub.attached and not self._attach(key, sub, cursor, min(cursor, tail)):
                    # The reader is already past us: one more history pass (now attached, whatever is
                    # read from here on is queued as well) closes the gap.
                    page = await self._history.page(key, cursor)
                    continue
                live = self._live(sub, cursor)
                # cursor follows the live batches: after a detach, history resumes from where they ended
                async for batch in live:
                    if batch is None:  # a heartbeat: numbered as the last event this subscriber has
                        yield [keepalive_frame(max(cursor[1] - 1, 0))]
                        continue
                    frames, cursor, end = batch
                    told = _tells_the_end(sub, frames)
                    if frames:
                        yield frames
                    del frames
                    if told:
                        return
                    if end is not None:
                        for rest in await self._history.rest(response_id, cursor, end, joined):
                            yield rest
                        return
                page = await self._history.page(key, cursor)  # fell behind and was detached
        finally:
            self._detach(key, sub)

    async def _live(
        self, sub: Subscriber, cursor: EntryId
    ) -> AsyncIterator[tuple[list[bytes], EntryId, dict[bytes, bytes] | None] | None]:
        """What each batch brings (frames, the cursor after them, the end marker's fields), or None for
        a heartbeat."""
        while True:
            if sub.batches:
                frames, cursor, end = take_frames(sub.batches.pop(0), cursor)
                yield frames, cursor, end
                del frames  # sent: not held while waiting for the next batch
                continue
            if sub.stopped:
                raise EventHubStopped("the event hub stopped")
            if sub.lost is not None:
                raise sub.lost(cursor)
            if not sub.attached:
                return
            if sub.idle:
                sub.idle = False
                yield None
                continue
            sub.cursor = cursor
            await sub.wait()
            if sub.cursor > cursor:  # the dispatch handed batches to the client meanwhile (_hand_over)
                cursor = sub.cursor
                yield [], cursor, None

    # --- the shared reader ----------------------------------------------------------------------
    def _attach(self, key: str, sub: Subscriber, cursor: EntryId, start: EntryId) -> bool:
        """Register ``sub`` as having seen ``cursor``; False if the reader already went past it.

        ``start``: where the reader starts if it does not follow the stream yet, at most the log's end.
        A subscriber may ask for events after one the log has not reached (``starting_after`` ahead of
        a running response): a reader started there would skip, for every later subscriber, what the
        log gets up to it (the subscriber itself skips it anyway: ``take_frames``)."""
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = self._busy[key] = FollowedStream(key, start)
            self._busy_lane.wake()
        sub.attached = True
        sub.since = time.monotonic()
        stream.subscribers.add(sub)
        return stream.cursor <= cursor

    def _detach(self, key: str, sub: Subscriber) -> None:
        stream = self._streams.get(key)
        if stream is not None:
            stream.subscribers.discard(sub)
            if not stream.subscribers:
                self._forget(key)

    def _forget(self, key: str) -> None:
        """No longer followed. A quiet read on its way may still name it: what it brings is dropped."""
        del self._streams[key]
        self._busy.pop(key, None)
        self._quiet.pop(key, None)

    def _resync(self) -> None:
        """After a reader failed: a stream's cursor may have moved past entries that did not reach all its
        subscribers. Every subscriber is detached, as one that fell behind is, and reads on from history after
        its own cursor; the batches it holds are still its (``_live`` yields them first)."""
        for key, stream in list(self._streams.items()):
            for sub in stream.subscribers:
                sub.attached = False
                sub.wake()
            self._forget(key)

    async def _read_forever(self, lane: ReadLane, streams: dict[str, FollowedStream]) -> None:
        """One lane's reads, for as long as the hub runs: ``streams`` is the lane's own dict."""
        while True:
            if not streams:
                lane.work.clear()
                await lane.work.wait()
                continue
            if self._recheck:
                try:
                    await self._drop_lost_streams()
                except OUTAGE as exc:
                    self._outage.failed(exc)
                    await asyncio.sleep(0.5)
                    continue
                self._outage.answered()
            reading = dict(streams)
            try:
                reply = await lane.read(reading.values())
            except OUTAGE as exc:
                self._outage.failed(exc)
                self._recheck = True
                await asyncio.sleep(0.5)
                continue
            except ResponseError as refused:
                await self._drop_overwritten_streams(list(reading), refused)
                continue
            self._outage.answered()
            now = time.monotonic()
            for raw_key, entries in reply:
                self._dispatch(raw_key.decode(), [entry(raw) for raw in entries], reading, now)
            if lane is self._busy_lane and now >= self._next_quiet_check:
                self._move_quiet_streams(now)

    def _move_quiet_streams(self, now: float) -> None:
        """Between two busy reads (none on its way names them): the streams without an entry for
        ``quiet_after_seconds`` go to the quiet lane, whose read is woken to name them."""
        self._next_quiet_check = now + self._quiet_after / 2
        quiet = [key for key, stream in self._busy.items() if now - stream.last_entry_at >= self._quiet_after]
        for key in quiet:
            self._quiet[key] = self._busy.pop(key)
        if quiet:
            self._quiet_lane.wake()

    async def _drop_lost_streams(self) -> None:
        """After a failed read: the followed streams lost meanwhile, or written anew past what was read of
        them, lose their subscribers (``survival.py``)."""
        lost, refused = await survival.losses(self._side_client, {key: s.cursor for key, s in self._streams.items()})
        self._recheck = False
        if refused:
            await self._drop_overwritten_streams([key for key, _ in refused], refused[0][1])
        for loss in lost:
            if loss.gone is not None:
                await self._mark_gone(loss.key, loss.gone)
            if (stream := self._streams.get(loss.key)) is not None:
                self._lose(loss.key, stream, loss.how, loss.why)

    async def _mark_gone(self, key: str, gone: Span) -> None:
        """Numbers this hub's followers read that their stream came back without: marked as written anew
        (``rewinds.py``), so that a reader who resumes among them once the takeover rewrote them is told too."""
        try:
            await mark_read_rewound(self._side_client, key.removeprefix(redis_keys.events("")), gone,
                                    self._rewound_ttl)
        except (OSError, RedisConnectionError, RedisTimeoutError, ResponseError) as exc:  # told all the same
            log.warning("event hub: could not mark events %d..%d of %s as written anew (%s)", *gone, key, exc)

    async def _drop_overwritten_streams(self, keys: list[str], refused: Exception) -> None:
        """A read of ``keys`` that Redis refused (``refused``), not for an outage: the keys that hold something
        other than a stream lose their followers (:class:`StreamOverwritten`); if none does, ``refused`` is
        raised (the supervisor's: nothing here tells which stream to end)."""
        try:
            kinds = await survival.overwritten(self._side_client, keys)
        except OUTAGE:  # Redis went away meanwhile: the read is made again once it answers (and checked then)
            self._recheck = True
            return
        if not kinds:
            raise refused
        for key, kind in kinds.items():
            if (stream := self._streams.get(key)) is not None:
                self._lose(key, stream, StreamOverwritten, f"holds a {kind.decode()}, not a stream ({refused})")

    def _lose(self, key: str, stream: FollowedStream, lost: type[StreamLost], why: str) -> None:
        log.warning("event hub: %s %s; ending its %d followers", key, why, len(stream.subscribers))
        self._forget(key)
        for sub in stream.subscribers:
            sub.lost = lost
            sub.wake()

    def _dispatch(self, key: str, entries: list[Entry], reading: dict[str, FollowedStream], now: float) -> None:
        stream = reading[key]
        if self._streams.get(key) is not stream:
            return  # unsubscribed (or replaced) while the read was on its way
        stream.move_to(entries[-1][0])
        stream.last_entry_at = now
        if b"end" in entries[-1][1]:
            self._forget(key)  # ended: every subscriber stops at the end marker
        elif key in self._quiet:  # busy again: its next entries come with the busy lane's
            self._busy[key] = self._quiet.pop(key)
            self._busy_lane.wake()
        overflowed = []
        for sub in stream.subscribers:
            if (sink := sub.sink) is not None and self._hand_over(sub, sink, entries):
                continue
            sub.batches.append(entries)
            if len(sub.batches) > self._max_pending:
                overflowed.append(sub)
            sub.wake()
        for sub in overflowed:  # it reads its backlog from history instead
            sub.batches.clear()
            sub.attached = False
            self._detach(key, sub)

    @staticmethod
    def _hand_over(sub: Subscriber, sink: Sink, entries: list[Entry]) -> bool:
        """Write a read's frames straight to a waiting subscriber's client, if it has nothing queued (order)
        and its connection takes them now; an end marker or a terminal event is left to the iteration, which ends the
        stream."""
        waiter = sub.waiter
        if waiter is None or waiter.done() or sub.batches or sub.stopped or sub.lost is not None:
            return False
        frames, cursor, end = take_frames(entries, sub.cursor)
        if end is not None or _tells_the_end(sub, frames):
            return False
        if frames and not sink.offer(b"".join(frames)):
            return False
        sub.cursor = cursor
        return True

    async def _beat_forever(self) -> None:
        """Each tick, a heartbeat for every client's stream that would otherwise be quiet for the whole
        ``heartbeat_seconds`` before the next tick: the first comes 3/4 to 1 interval after its last batch
        (or attach), the next ones one interval apart while it stays quiet."""
        tick = self._heartbeat_seconds / HEARTBEAT_TICKS
        at = time.monotonic()
        while True:
            # On a schedule: a tick the event loop ran late does not delay the next ones.
            at = max(at + tick, time.monotonic())
            await asyncio.sleep(at - time.monotonic())
            self._beat(at, tick)

    def _beat(self, now: float, tick: float) -> None:
        due = self._heartbeat_seconds - tick  # quiet this long: the next tick would be too late
        for stream in self._streams.values():
            if now - stream.last_entry_at < due:
                continue
            for sub in stream.subscribers:
                if sub.client_stream and now - sub.since >= due:
                    # Half a tick ahead: the next one comes HEARTBEAT_TICKS ticks later, not one fewer (as
                    # float sums of ``tick`` a hair short of ``due`` would make it), one per interval.
                    sub.since = now + tick / 2
                    sub.idle = True
                    sub.wake()

    @property
    def _side_client(self) -> Redis:
        if self._side is None:
            raise RuntimeError("EventHub.start() was not awaited")
        return self._side

