"""A real ``celery worker`` process (``python -m oss_responses.workers``) on a real redis-server."""

from __future__ import annotations

import base64
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis as redis_lib
from celery.worker.components import Pool
from support import MODEL
from support.processes import (
    launch,
    open_files_limit,
    ready_workers,
    service_env,
    start_worker_process,
    stop_process,
)
from support.streams import assert_contiguous, wait_for_end, wait_for_event
from support.workers import accept, worker_settings

from oss_responses.config import Settings
from oss_responses.statuses import RUN_RESPONSE_TASK
from oss_responses.storage import Database, get_response, migrate
from oss_responses.task_messages import run_response_message
from oss_responses.workers.celery_app import enqueue, make_celery


def test_celery_worker_runs_enqueued_response_end_to_end(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    settings = worker_settings(database_url, redis_url)
    db = Database(settings.database_url)
    start_worker(settings, "e2e", fork=False)
    response_id = accept(db, redis, settings, input="hello celery", background=True)
    enqueue(make_celery(settings), settings, response_id, MODEL)
    events = wait_for_end(redis, response_id)
    assert_contiguous(events)
    assert events[-1]["type"] == "response.completed"
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "completed"
    db.dispose()


def test_celery_worker_raises_a_low_open_files_limit(redis_url: str, tmp_path: Path) -> None:
    """Every running response may hold Redis connections (and MCP ones): a worker started with a soft
    limit of 128 open files raises it before its engine starts."""
    settings = worker_settings(f"sqlite:///{tmp_path / 'unused.db'}", redis_url)
    migrate(settings.database_url)
    worker = start_worker_process(settings, tmp_path / "worker.log", open_files=128, fork=False)
    try:
        assert open_files_limit(worker.pid) > 128
    finally:
        stop_process(worker)


def test_celery_worker_that_cannot_start_exits_non_zero_saying_why(redis_url: str, tmp_path: Path) -> None:
    # Celery logs a failed start step and exits 0: a supervisor would think the worker stopped on purpose.
    settings = worker_settings(f"sqlite:///{tmp_path / 'unused.db'}", redis_url)
    migrate(settings.database_url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = service_env(settings, OSS_RESPONSES_WORKER_METRICS_PORT=str(port))
        process = launch("oss_responses.workers", ["--loglevel=WARNING"], env, tmp_path / "worker.log", fork=False)
        try:
            returncode = process.wait(timeout=60)
        finally:
            stop_process(process)
    assert returncode != 0
    assert "oss-responses worker not started: OSError" in (tmp_path / "worker.log").read_text()
    assert not ready_workers(redis_lib.Redis.from_url(redis_url))


def test_celery_worker_with_json_logs_writes_only_json_lines(redis_url: str, tmp_path: Path) -> None:
    # A log pipeline reads stderr line by line: Celery's warnings (running as root here) are log lines
    # too, and its banner (a block of text on stdout) is left out.
    settings = worker_settings(f"sqlite:///{tmp_path / 'db.sqlite'}", redis_url)
    migrate(settings.database_url)
    client = redis_lib.Redis.from_url(redis_url)
    before = ready_workers(client)
    env = service_env(settings, OSS_RESPONSES_LOG_FORMAT="json")
    worker = subprocess.Popen([sys.executable, "-m", "oss_responses.workers"], env=env, cwd=Path(__file__).parents[2],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready_workers(client) - before and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        stdout, stderr = worker.communicate(timeout=60)
    assert stderr.strip() and all(json.loads(line) for line in stderr.splitlines())
    assert any(json.loads(line)["message"] == "worker: Warm shutdown (MainProcess)" for line in stderr.splitlines())
    assert not stdout.strip()  # neither the banner nor Celery's shutdown lines


def test_worker_engine_step_is_stopped_before_the_pool(redis_url: str, tmp_path: Path) -> None:
    """Celery stops a worker's steps in the reverse of its boot order, which puts a step that requires
    nothing on either side of the pool (a different side per process). Stopped after the pool, the
    engine step never handed off: ``celery control shutdown`` (and SIGQUIT) waited for every running
    response to end."""
    settings = worker_settings(f"sqlite:///{tmp_path / 'unused.db'}", redis_url)
    worker = make_celery(settings).WorkController(hostname="steps@test", pool_cls="threads", concurrency=1)
    graph = worker.blueprint.graph
    engine = next(type(step) for step in worker.blueprint.order if step.label == "oss-responses engine")
    required: set[type] = set()
    pending = [engine]
    while pending:
        for step in graph.adjacent[pending.pop()]:
            required.add(step)
            pending.append(step)
    assert Pool in required
    aliases = [step.alias for step in worker.blueprint.order]
    assert aliases.index("Pool") < aliases.index("oss-responses engine")  # started after it, stopped before


def test_celery_revoke_with_terminate_of_running_task_cancels_its_response(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    """``celery control revoke ID --terminate`` of a running response's task: the threads pool cannot kill
    the thread, and said so with a traceback in the control handler while the response ran on. It is
    cancelled instead, its stream ending on the cancel."""
    settings = worker_settings(database_url, redis_url, scripted_tokens_per_second=20.0)
    db = Database(settings.database_url)
    worker = start_worker(settings, "terminating")
    node = f"terminating@{socket.gethostname()}"
    control = make_celery(settings).control
    response_id = accept(db, redis, settings, input="tokens 400", background=True)
    enqueue(make_celery(settings), settings, response_id, MODEL)
    wait_for_event(redis, response_id, "response.output_text.delta")
    [active] = control.inspect(destination=[node], timeout=5).active()[node]
    control.revoke(active["id"], terminate=True, destination=[node], reply=True, timeout=10)
    events = wait_for_end(redis, response_id)
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "cancelled"
    assert len(events) < 400 and "response.completed" not in {event["type"] for event in events}
    assert "Traceback" not in worker.log.read_text()
    db.dispose()


def test_celery_revoke_of_queued_task_cancels_its_response(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    """``celery control revoke ID`` of a response's task still in its queue: the worker that meets it
    discards it, and its response ends ``cancelled`` with its stream closed (it had stayed ``queued`` until
    the stale sweep sent its task again, ten minutes later, and then ran)."""
    settings = worker_settings(database_url, redis_url)
    db = Database(settings.database_url)
    start_worker(settings, "revoking")
    node, queue = f"revoking@{socket.gethostname()}", settings.queue_for(MODEL)
    control = make_celery(settings).control
    # Ready (its engine up) comes before Celery's consumer listens to control commands.
    deadline = time.monotonic() + 30
    while not control.ping(destination=[node], timeout=1) and time.monotonic() < deadline:
        pass
    control.cancel_consumer(queue, destination=[node], reply=True, timeout=10)  # the task waits in Redis
    time.sleep(2)  # kombu's BRPOP already waiting (1 s at a time) still names the queue
    response_id = accept(db, redis, settings, input="tokens 20", background=True)
    enqueue(make_celery(settings), settings, response_id, MODEL)
    [message] = [json.loads(raw) for raw in redis.lrange(queue, 0, -1)]
    assert response_id in message["headers"]["argsrepr"]
    control.revoke(message["headers"]["id"], destination=[node], reply=True, timeout=10)
    control.add_consumer(queue, destination=[node], reply=True, timeout=10)
    events = wait_for_end(redis, response_id)
    assert [event["type"] for event in events] == ["response.created", "response.queued"]
    record = db.run(get_response, response_id)
    assert record is not None and record.status == "cancelled"
    db.dispose()


def _malformed_task_messages(settings: Settings, queue: str) -> list[str]:
    """Items on a model's queue that are no task message of this service: not JSON, not kombu's envelope, a
    body that is not base64, none at all or not Celery's ``[args, kwargs, embed]``, headers without a task id."""
    app = make_celery(settings)

    def envelope(**changes: Any) -> dict[str, Any]:
        return json.loads(run_response_message(app, queue, "resp_never_stored")) | changes

    def with_body(body: Any) -> str:
        return json.dumps(envelope(body=base64.b64encode(json.dumps(body).encode()).decode()))

    without_id = envelope()
    del without_id["headers"]["id"]
    return [
        "not json", "[1, 2]", "{}", json.dumps(envelope(body="!!!not base64")),
        json.dumps({key: value for key, value in envelope().items() if key != "body"}),
        json.dumps(without_id), with_body([["resp_never_stored"], {}]), with_body({"not": "a list"}),
    ]


def test_celery_worker_drops_malformed_task_messages_and_runs_the_next(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    """A queue item that is no task message (pushed by hand, another application, a bug) is dropped with an
    ERROR line. Its exception had escaped the consumer: not JSON, not an object, a body that is no base64 or
    no ``[args, kwargs, embed]`` stopped the worker ("Unrecoverable error"), and one that kombu had recorded
    as unacknowledged was put back on the queue as the worker stopped, stopping every worker that started
    after it; a KeyError (no ``properties``, no task id) was taken for a lost connection, and the worker
    reconnected ~5 times a second for good, putting its running tasks back on the queue each time."""
    settings = worker_settings(database_url, redis_url)
    db = Database(settings.database_url)
    worker = start_worker(settings, "malformed")
    queue = settings.queue_for(MODEL)
    malformed = _malformed_task_messages(settings, queue)
    for item in malformed:
        redis.lpush(queue, item)
    response_id = accept(db, redis, settings, input="tokens 5", background=True)
    enqueue(make_celery(settings), settings, response_id, MODEL)  # popped after every malformed item
    events = wait_for_end(redis, response_id)
    assert events[-1]["type"] == "response.completed"
    deadline = time.monotonic() + 10
    while redis.hlen("unacked") and time.monotonic() < deadline:  # the response's own task, acked as it returns
        time.sleep(0.05)
    assert worker.process.poll() is None
    assert redis.llen(queue) == 0 and redis.hlen("unacked") == 0
    log = worker.log.read_text()
    assert "Unrecoverable error" not in log and "Connection to broker lost" not in log
    dropped = log.count("is no task message") + log.count("Received invalid task message")
    assert dropped == len(malformed)
    db.dispose()


def test_celery_worker_runs_a_task_sent_with_protocol_1(
    database_url: str, redis_url: str, redis: redis_lib.Redis, start_worker
) -> None:  # type: ignore[no-untyped-def]
    """A task message of Celery's protocol 1 (``task_protocol=1``: its id and arguments in its body, no task
    id in its headers) is one Celery runs: the check that refuses messages Celery cannot build a request from
    must not take it for one (it dropped it, "Received invalid task message: its headers name no task id")."""
    settings = worker_settings(database_url, redis_url)
    db = Database(settings.database_url)
    start_worker(settings, "protocol-1")
    queue = settings.queue_for(MODEL)
    response_id = accept(db, redis, settings, input="tokens 5", background=True)
    app = make_celery(settings)
    app.conf.task_protocol = 1
    app.send_task(RUN_RESPONSE_TASK, args=(response_id, {}), queue=queue, routing_key=queue)
    [message] = [json.loads(raw) for raw in redis.lrange(queue, 0, -1)]
    assert "id" not in message["headers"]  # protocol 1 indeed
    events = wait_for_end(redis, response_id)
    assert events[-1]["type"] == "response.completed"
    db.dispose()


def test_celery_worker_with_autoscale_exits_non_zero_saying_why(redis_url: str, tmp_path: Path) -> None:
    """``--autoscale``: the threads pool cannot grow. The worker started, then stopped at its first task
    ("Unrecoverable error: 'ThreadsPool' object has no attribute 'grow'"), the task put back on the queue for
    the next start to stop on. It is refused at start, saying why."""
    settings = worker_settings(f"sqlite:///{tmp_path / 'unused.db'}", redis_url)
    migrate(settings.database_url)
    log = tmp_path / "worker.log"
    process = launch("oss_responses.workers", ["--loglevel=WARNING", "--autoscale=4,1"], service_env(settings), log)
    try:
        returncode = process.wait(timeout=60)
    finally:
        stop_process(process)
    assert returncode != 0
    assert "oss-responses worker not started: --autoscale=4,1 is not supported" in log.read_text()
    assert "Traceback" not in log.read_text()
    assert not ready_workers(redis_lib.Redis.from_url(redis_url))


def test_celery_worker_with_amqp_celery_broker_url_exits_non_zero_saying_why(redis_url: str, tmp_path: Path) -> None:
    """``CELERY_BROKER_URL`` (Celery's own variable, which wins over the setting) naming an AMQP broker: the worker
    hung retrying a transport it cannot use, in a traceback. The task queues are Redis lists: refused at start."""
    settings = worker_settings(f"sqlite:///{tmp_path / 'unused.db'}", redis_url)
    migrate(settings.database_url)
    env = service_env(settings) | {"CELERY_BROKER_URL": "amqp://guest:amqp-pw-51c@127.0.0.1:5672//"}
    done = subprocess.run([sys.executable, "-m", "oss_responses.workers"], env=env, cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert done.returncode == 1
    refused = "oss-responses worker not started: the broker amqp://127.0.0.1:5672// is not a Redis"
    assert refused in done.stdout
    assert "Traceback" not in done.stdout and "amqp-pw-51c" not in done.stdout
