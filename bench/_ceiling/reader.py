"""The API's side of ``worker_ceiling.py --reader``: one process whose ``EventHub`` follows every stream.

An API process relays each stream it serves through one hub (one multiplexed ``XREAD`` for all of
them); here the hub follows all the ceiling run's streams, as one API process serving every client
of the worker would, and drops the frames instead of writing them to sockets. So its CPU is the hub's
share of the API's relay, and Redis's CPU then counts the reads as well as the worker's writes.

    python bench/_ceiling/reader.py REDIS_URL IDS_FILE READY_FILE

It subscribes to every response id in IDS_FILE (one per line) from its first event, touches
READY_FILE once all are followed, and prints ``events bytes`` once every stream has ended.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import uvloop

from oss_responses.eventlog import EventHub
from oss_responses.heap import tune_garbage_collection


async def follow_all(redis_url: str, ids: list[str], ready: Path) -> tuple[int, int]:
    hub = EventHub(redis_url)
    await hub.start()
    tune_garbage_collection("api")  # as the API's main does once its app is built
    counts = [0, 0]

    async def follow(response_id: str) -> None:
        async for chunk in await hub.open(response_id, chunked=True):
            counts[0] += chunk.count(b"\n\n")  # one per SSE frame; a chunk joins one read's frames
            counts[1] += len(chunk)

    tasks = [asyncio.create_task(follow(response_id)) for response_id in ids]
    while hub.stream_count < len(ids):
        await asyncio.sleep(0.01)
    ready.touch()
    await asyncio.gather(*tasks)
    await hub.stop()
    return counts[0], counts[1]


def main() -> None:
    redis_url, ids_file, ready_file = sys.argv[1:4]
    ids = Path(ids_file).read_text().split()
    events, size = uvloop.run(follow_all(redis_url, ids, Path(ready_file)))
    print(events, size)


if __name__ == "__main__":
    main()
