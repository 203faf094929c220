"""With Redis gone (the API started with it, then it stopped), creating a response is a prompt 503 in
OpenAI's error shape, and nothing is stored (no row that would stay ``queued`` forever without a task);
streaming, resuming, cancelling and deleting one are 503s too, and change nothing. The same holds for a
Redis that answers but refuses writes (full, at maxmemory under noeviction)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx2
import pytest
import redis as redis_lib
from sqlalchemy import func, select
from support import MODEL
from support.api_server import ApiServer
from support.servers import RedisServer, start_redis
from support.workers import overwrite_row

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.storage import ResponseRow


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.stop()


@pytest.fixture
def settings(database_url: str, own_redis: RedisServer) -> Settings:
    return Settings(database_url=database_url, redis_url=own_redis.url, models=[MODEL])


@pytest.mark.parametrize("body", [{"background": True}, {"stream": True}, {}], ids=["background", "stream", "plain"])
def test_create_response_with_redis_down_is_503_storing_nothing(
    http: httpx2.Client, api: ApiServer, own_redis: RedisServer, body: dict[str, object]
) -> None:
    own_redis.process.kill()
    own_redis.process.wait()
    started = time.monotonic()
    response = http.post("/v1/responses", json={"model": MODEL, "input": "hi"} | body)
    assert response.status_code == 503, response.text
    assert time.monotonic() - started < 10
    error = response.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "queue_unavailable"
    assert response.headers["retry-after"] == "5"  # the SDKs wait that long before their retry
    rows = api.db.run(lambda session: session.execute(select(func.count()).select_from(ResponseRow)).scalar_one())
    assert rows == 0


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/responses/{id}?stream=true"),
    ("GET", "/v1/responses/{id}?stream=true&starting_after=0"),
    ("POST", "/v1/responses/{id}/cancel"),
    ("DELETE", "/v1/responses/{id}"),
], ids=["stream", "resume", "cancel", "delete"])
def test_redis_route_with_redis_down_is_503_changing_nothing(
    http: httpx2.Client, own_redis: RedisServer, method: str, path: str
) -> None:
    """Every route that needs Redis answers a 503 in OpenAI's shape (it was a 500, and the client's
    keep-alive connection was reset after it), and the response stays as it was."""
    response_id = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True}).json()["id"]
    own_redis.process.kill()
    own_redis.process.wait()
    response = http.request(method, path.format(id=response_id))
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "redis_unavailable"
    assert response.headers["retry-after"] == "5"
    after = http.get(f"/v1/responses/{response_id}")  # the same keep-alive connection
    assert after.status_code == 200 and after.json()["status"] == "queued"


def test_retrieve_running_response_with_redis_down_reads_sql(
    http: httpx2.Client, api: ApiServer, own_redis: RedisServer
) -> None:
    # A running response's retrieve asks Redis whether its terminal event is written (jobs.caught_up);
    # without Redis, SQL's view stands.
    response_id = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True}).json()["id"]
    overwrite_row(api.db, response_id, status="in_progress")
    own_redis.process.kill()
    own_redis.process.wait()
    response = http.get(f"/v1/responses/{response_id}")
    assert response.status_code == 200, response.text


def _fill(server: RedisServer) -> None:
    """maxmemory under noeviction, reached: every write refused with OOM, reads still answered."""
    client = redis_lib.Redis.from_url(server.url)
    client.config_set("maxmemory", 1)
    client.close()


@pytest.mark.parametrize("body", [{"background": True}, {"stream": True}, {}], ids=["background", "stream", "plain"])
def test_create_response_with_redis_full_is_503_storing_nothing(
    http: httpx2.Client, api: ApiServer, own_redis: RedisServer, body: dict[str, object]
) -> None:
    # It was a 500 (the opening events' refused XADD), and the row it left was run by the stale sweep.
    _fill(own_redis)
    response = http.post("/v1/responses", json={"model": MODEL, "input": "hi"} | body)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "queue_unavailable"
    rows = api.db.run(lambda session: session.execute(select(func.count()).select_from(ResponseRow)).scalar_one())
    assert rows == 0


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/responses/{id}/cancel"),
    ("DELETE", "/v1/responses/{id}"),
], ids=["cancel", "delete"])
def test_redis_route_with_redis_full_is_503_changing_nothing(
    http: httpx2.Client, own_redis: RedisServer, method: str, path: str
) -> None:
    response_id = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True}).json()["id"]
    listener = redis_lib.Redis.from_url(own_redis.url).pubsub()
    listener.subscribe(redis_keys.CANCEL_CHANNEL)
    _fill(own_redis)
    response = http.request(method, path.format(id=response_id))
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "redis_unavailable"
    after = http.get(f"/v1/responses/{response_id}")
    assert after.status_code == 200 and after.json()["status"] == "queued"
    # A cancel published while its flag was refused stopped a running response its client was told stays.
    assert listener.get_message(timeout=1)["type"] == "subscribe"  # type: ignore[index]
    assert listener.get_message(timeout=0.5) is None
    listener.close()
