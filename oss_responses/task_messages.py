"""A response's task message, as the workers' Celery consumes it from its model's queue.

Two ways to send it. Workers (a takeover, a handoff) send it through Celery (``send_run_response``), from a
task thread. The API builds the very bytes kombu would push (``run_response_message``) and pushes them with
its asyncio Redis client: ``send_task`` blocks on its socket, so the accept held a thread for it, and the hop
to that thread and back cost the accept more of the API's CPU than building the message (~29 us). Measured with
``bench/service.py --phases e`` (8 concurrent streamed requests), four pairs alternated: the API's CPU per request
4.7-5.0 ms through a thread, 4.1-4.6 ms pushed by the loop.

Either way the arguments name the response only, and its MCP credentials (a takeover's) only as
``{<secrets>}`` in the headers: Celery would otherwise write them there through its ``saferepr`` (task events
and Flower show the headers).
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from kombu import serialization
from kombu.utils.uuid import uuid

from oss_responses.statuses import RUN_RESPONSE_TASK

if TYPE_CHECKING:
    from celery import Celery

# kombu's Redis transport: a message persists (Celery's default delivery mode), at priority 0 it goes to the
# list named after its queue, and its body travels base64-encoded inside the JSON envelope.
PERSISTENT = 2
BODY_ENCODING = "base64"


def _argsrepr(response_id: str, secrets: dict[str, Any] | None) -> str:
    return f"({response_id!r}, {'{<secrets>}' if secrets else '{}'})"


def task_mark(response_id: str) -> str:
    """Text that every task message of ``response_id`` holds, and no other's: the start of its arguments' repr
    in its headers (unchanged by their JSON), however it was sent."""
    return f"({response_id!r}, "


def send_run_response(app: Celery, queue: str, response_id: str, secrets: dict[str, Any] | None = None) -> None:
    """A response's task on its model's queue, through Celery: what a takeover and a handoff send.

    Nothing is declared per message: the queue is a Redis list that the anonymous exchange reaches by name, and
    kombu's per-publish declare check copies and binds the queue's entities (with Celery's ``saferepr`` of the
    arguments, a third of ``send_task``: measured 300-350 against 225 us per task).
    """
    app.send_task(
        RUN_RESPONSE_TASK, args=(response_id, secrets or {}), queue=queue, routing_key=queue, declare=[],
        argsrepr=_argsrepr(response_id, secrets), kwargsrepr="{}",
    )


def run_response_message(app: Celery, queue: str, response_id: str) -> str:
    """What ``send_run_response(app, queue, response_id)`` pushes onto ``queue``'s list (LPUSH), built without
    a broker connection.

    Celery builds the task message (its protocol 2: headers, properties, body); the envelope around it is
    what kombu's Redis transport makes of it (``Channel.prepare_message``, then ``basic_publish``'s body
    encoding, delivery info and tag, then ``_put``'s JSON). ``tests/test_task_messages.py`` holds the two to
    the same message.
    """
    task_id = uuid()
    argsrepr = _argsrepr(response_id, None)
    headers, properties, body, _ = app.amqp.as_task_v2(
        task_id, RUN_RESPONSE_TASK, (response_id, {}), {}, reply_to=app.thread_oid,
        argsrepr=argsrepr, kwargsrepr="{}", ignore_result=None,
    )
    serialized = serialization.dumps(body, serializer="json")  # type: ignore[no-untyped-call]  # kombu: no annotations
    content_type, content_encoding, payload = serialized
    properties.update(
        argsrepr=argsrepr, kwargsrepr="{}", delivery_mode=PERSISTENT,
        delivery_info={"exchange": "", "routing_key": queue}, priority=0,
        body_encoding=BODY_ENCODING, delivery_tag=uuid(),
    )
    return json.dumps({
        "body": base64.b64encode(payload.encode()).decode(),
        "content-encoding": content_encoding,
        "content-type": content_type,
        "headers": headers,
        "properties": properties,
    })
