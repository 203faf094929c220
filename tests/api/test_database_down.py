"""With the database gone (the API started with it, then it stopped), every route that reads or writes it
answers a 503 ``database_unavailable`` in OpenAI's error shape, as with Redis gone; it was a bare 500
``server_error`` (found by an outside probe restarting PostgreSQL under load). Nothing is queued."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import psycopg
import pytest
import redis as redis_lib
from support import MODEL
from support.api_server import ApiServer
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
