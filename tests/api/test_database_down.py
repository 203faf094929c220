"""With the database gone (the API started with it, then it stopped), every route that reads or writes it
answers a 503 ``database_unavailable`` in OpenAI's error shape, as with Redis gone; it was a bare 500
``server_error`` (found by an outside probe restarting PostgreSQL under load). Nothing is queued."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import psycopg
import pytest
import redis as redis_lib
from openai import OpenAI
from openai.types.responses import ResponseStreamEvent
from support import MODEL
from support.api_server import ApiServer
from support.processes import start_api_process, start_worker_process, stop_process
from support.sdk import wait_ended
from support.servers import PostgresCluster, start_postgres

from oss_responses.config import Settings
from oss_responses.storage import migrate


@pytest.fixture
def own_postgres() -> Iterator[PostgresCluster]:
    cluster = start_postgres()
    yield cluster
    cluster.stop()


@pytest.fixture
def settings(own_postgres: PostgresCluster, redis_url: str) -> Settings:
    database_url = own_postgres.create_database("down")
    migrate(database_url)
    return Settings(database_url=database_url, redis_url=redis_url, models=[MODEL])


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/responses", {"model": MODEL, "input": "hi", "background": True}),
    ("GET", "/v1/responses/resp_0123", None),
    ("POST", "/v1/responses/resp_0123/cancel", None),
    ("DELETE", "/v1/responses/resp_0123", None),
    ("GET", "/v1/responses/resp_0123/input_items", None),
], ids=["create", "retrieve", "cancel", "delete", "input_items"])
def test_route_with_database_down_is_503_database_unavailable(
    http: httpx2.Client, api: ApiServer, own_postgres: PostgresCluster, redis: redis_lib.Redis,
    method: str, path: str, body: dict[str, object] | None,
) -> None:
    own_postgres.stop()
    response = http.request(method, path, json=body)
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "database_unavailable")
    assert redis.llen(api.settings.queue_for(MODEL)) == 0


def test_create_with_database_read_only_is_503_database_unavailable(
    http: httpx2.Client, api: ApiServer, own_postgres: PostgresCluster, redis: redis_lib.Redis,
) -> None:
    """A failover's demoted primary refuses writes ("cannot execute INSERT in a read-only transaction"):
    unavailable for now, as a refused connection is; it was a 500, and the 500 reset the client's
    keep-alive connection too."""
    own_postgres.execute('ALTER DATABASE "down" SET default_transaction_read_only = on')
    own_postgres.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'down'")
    response = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True})
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "database_unavailable"
    assert response.headers["retry-after"]
    assert redis.llen(api.settings.queue_for(MODEL)) == 0


def test_retrieve_response_past_lock_timeout_is_503_saying_database_busy(
    http: httpx2.Client, api: ApiServer, own_postgres: PostgresCluster
) -> None:
    """A lock held past PostgreSQL's lock_timeout (an operator's migration or maintenance): the database
    answered, so "cannot reach its database" was the wrong thing to tell."""
    own_postgres.execute("""ALTER DATABASE "down" SET lock_timeout = '200ms'""")
    own_postgres.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'down'")
    with psycopg.connect(host="127.0.0.1", port=own_postgres.port, user="postgres", dbname="down") as holder:
        holder.execute("LOCK TABLE responses IN ACCESS EXCLUSIVE MODE")
        response = http.get("/v1/responses/resp_0123")
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "database_unavailable" and "too busy" in error["message"]


def test_readyz_with_database_read_only_is_503_naming_it(
    http: httpx2.Client, api: ApiServer, own_postgres: PostgresCluster
) -> None:
    # Every create would be a 503: a load balancer should send them to a replica whose database takes them.
    own_postgres.execute('ALTER DATABASE "down" SET default_transaction_read_only = on')
    own_postgres.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'down'")
    response = http.get("/readyz")
    assert response.status_code == 503
    assert response.json()["database"] == "error: refusing writes (read-only)"


def test_stream_ends_at_its_terminal_event_while_the_save_waits_for_the_database(
    settings: Settings, own_postgres: PostgresCluster, tmp_path: Path
) -> None:
    """A worker writes a response's terminal event, then saves the response, retrying while the database is
    down, and only then the end marker. The client's stream stayed open until the save: keepalive events
    after ``response.completed`` for the whole outage (a 40 s PostgreSQL restart held every streamed call
    40 s past its answer), and a client that closed it on ``response.completed`` had a cancel sent (and
    failed, a traceback) for a response it was told had completed."""
    stack_settings = Settings(database_url=settings.database_url, redis_url=settings.redis_url, models=[MODEL],
                              scripted_tokens_per_second=40.0)
    api, base_url = start_api_process(stack_settings, tmp_path / "api.log")
    worker = start_worker_process(stack_settings, tmp_path / "worker.log")
    events: list[ResponseStreamEvent] = []
    answering = threading.Event()

    def consume() -> None:
        with OpenAI(base_url=f"{base_url}/v1", api_key="test", max_retries=0, timeout=120) as client:
            for event in client.responses.create(model=MODEL, input="tokens 80", stream=True):
                events.append(event)
                if event.type.endswith(".delta"):  # the worker holds the response: it needs SQL only to save it
                    answering.set()

    reader = threading.Thread(target=consume, name="client")
    try:
        reader.start()
        assert answering.wait(20), "the response did not start"
        own_postgres.shut_down()
        reader.join(timeout=20)
        ended_while_down = not reader.is_alive()
        own_postgres.start_again()  # from this thread: the server dies with the thread that started it
        reader.join(timeout=60)
        assert ended_while_down, "the stream stayed open after its terminal event, waiting for the database"
        assert events[-1].type == "response.completed"
        assert [e.sequence_number for e in events] == list(range(len(events)))
        with OpenAI(base_url=f"{base_url}/v1", api_key="test", max_retries=5, timeout=30) as client:
            stored = wait_ended(client, events[-1].response.id, timeout=30.0)  # type: ignore[union-attr]
        assert (stored.status, stored.output_text) == ("completed", events[-1].response.output_text)  # type: ignore[union-attr]
    finally:
        for process in (worker, api):
            stop_process(process)

