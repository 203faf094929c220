"""With the database gone (the API started with it, then it stopped), every route that reads or writes it
answers a 503 ``database_unavailable`` in OpenAI's error shape, as with Redis gone; it was a bare 500
``server_error`` (found by an outside probe restarting PostgreSQL under load). Nothing is queued."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
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
