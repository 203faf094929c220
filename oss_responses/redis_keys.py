"""Every Redis key and channel the service uses, in one place (the whole Redis layout).

- ``events(id)``   STREAM  one entry per event, entry id ``0-{sequence_number + 1}``, fields
                           ``f`` = the SSE frame bytes (``event: TYPE\\ndata: JSON\\n\\n``);
                           a last entry with field ``end`` marks the stream closed (terminal event
                           written, or the response was cancelled). TTL set once it ended. Once a
                           worker ended it, its frames move to SQL (``event_logs``) and the stream is
                           trimmed to a tombstone: ONE entry ``end`` + ``archived`` = last sequence
                           number (``eventlog/archive.py``), under the same TTL.
- ``lease(id)``    STRING  the worker id holding the response; TTL = lease_seconds, renewed.
- ``cancel(id)``   STRING  "1" once cancel was asked (a worker checks it before it starts).
- ``journal(id)``  LIST    a running response's journal: one JSON list of steps per flush (the
                           translator calls and engine calls so far, ``workers/journal.py``);
                           deleted when the stream closes.
- ``OPEN_STREAMS``   SET     the ids of the responses whose stream a worker claimed (or the API cancelled)
                           and nobody has closed yet: added by the claim, removed with the end marker.
                           A member whose response ended in SQL lost its end on the way (Redis was
                           down when it was written): the reaper ends that stream (``workers/unclosed.py``).
- ``rewound(id)``  STRING  "FIRST LAST": a takeover found the stream shorter than its lost run had numbered it
                           (Redis restored from an earlier state): events FIRST..LAST are written anew, maybe
                           otherwise, and a reader that saw one of the old ones is told so (``eventlog/rewinds.py``).
                           TTL: event_ttl_seconds.
- ``takeovers(id)`` STRING how many times the response was taken over from a lost worker.
- ``resume(id)``   STRING  set while a takeover task (or a stale queued response's task sent again,
                           or a handoff) waits: the reaper dispatches one at a time.
- ``relay(id)``    STRING  the instance id of the API process whose client runs this foreground response (not
                           background: its create's stream, its plain create waiting, its WebSocket): set by the
                           accept (TTL: event_ttl_seconds), deleted with the end marker (``relays.py``).
- ``api_alive(instance)`` STRING  set (with a short TTL, renewed every second) while that API process runs:
                           a worker's reaper cancels the running responses whose relay lost it (``relays.py``).
- ``CANCEL_CHANNEL`` PUBSUB  response ids to cancel; every worker listens, the one running it aborts.
- ``worker_ready(worker_id)`` STRING  set (with TTL) while a worker's engine is up: its readiness.
- ``model_context(model)`` STRING  the context (tokens) of the model's engine, set (with TTL) by its workers
                           while up; ``/v1/responses/input_tokens`` cuts by it for ``truncation: "auto"``.
- ``REAPER_LOCK`` STRING  held by the worker that is reaping lost responses.
- ``WEBHOOK_SWEEP_LOCK`` STRING  held by the worker sending stale webhook deliveries again.
- ``broker_queue(queue)`` LIST  Celery's Redis transport: a queue's waiting tasks (the key is the queue's
                           name, outside ``oss:``); the API's /metrics reads its length.
- ``hub_wake(hub_id)`` STREAM  one entry (MAXLEN 1, TTL) per read lane of an API process's EventHub (two:
                           busy and quiet streams); XADD to it wakes that lane's blocking multiplexed XREAD
                           when the streams it must name changed.
"""

from __future__ import annotations

PREFIX = "oss:"

CANCEL_CHANNEL = PREFIX + "cancel"

# The responses whose stream is open past its opening events (see the module's docstring).
OPEN_STREAMS = PREFIX + "streams:open"

# Held (SET NX PX) by the one worker reaping lost responses at a time.
REAPER_LOCK = PREFIX + "reaper:lock"

# Held (SET NX PX) by the one worker sweeping stale webhook deliveries at a time.
WEBHOOK_SWEEP_LOCK = PREFIX + "webhooks:sweep:lock"


def events(response_id: str) -> str:
    return f"{PREFIX}events:{response_id}"


def lease(response_id: str) -> str:
    return f"{PREFIX}lease:{response_id}"


def cancel(response_id: str) -> str:
    return f"{PREFIX}cancel:{response_id}"


def journal(response_id: str) -> str:
    return f"{PREFIX}journal:{response_id}"


def rewound(response_id: str) -> str:
    return f"{PREFIX}rewound:{response_id}"


def takeovers(response_id: str) -> str:
    return f"{PREFIX}takeovers:{response_id}"


def resume(response_id: str) -> str:
    return f"{PREFIX}resume:{response_id}"


def relay(response_id: str) -> str:
    return f"{PREFIX}relay:{response_id}"


# Around an instance id: also given to the claim's script, which reads a relay's key by its instance.
API_ALIVE = (f"{PREFIX}api:", ":alive")


def api_alive(instance_id: str) -> str:
    return f"{API_ALIVE[0]}{instance_id}{API_ALIVE[1]}"


def worker_ready(worker_id: str) -> str:
    return f"{PREFIX}worker:{worker_id}:ready"


def model_context(model: str) -> str:
    return f"{PREFIX}model:{model}:context"


def hub_wake(hub_id: str) -> str:
    return f"{PREFIX}hub:{hub_id}:wake"


def broker_queue(queue: str) -> str:
    """The list kombu's Redis transport keeps a queue's waiting messages in (priority 0: the name itself)."""
    return queue


def event_id(sequence_number: int) -> str:
    """Stream entry id of the event with this sequence_number (ids must be > 0-0)."""
    return f"0-{sequence_number + 1}"
