"""GET /v1/models, /healthz and /readyz."""

from __future__ import annotations

from pathlib import Path

import httpx2
import openai
import pytest
from openai import OpenAI
from support import MODEL
from support.api_server import serve_in_thread
from support.servers import free_port
from support.sqlite_refusals import fill_filesystem, small_filesystem, unwritable

from oss_responses.config import Settings
from oss_responses.eventlog import EventHub
from oss_responses.storage import migrate
from oss_responses.storage.db import ensure_sqlite_directory


def test_list_models_returns_configured_models(client: OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models] == [MODEL, "gpt-oss-120b"]
    assert all(m.object == "model" and m.owned_by for m in models)


def test_retrieve_model_known_and_unknown(client: OpenAI) -> None:
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-9")


def test_list_and_retrieve_model_give_gpt_oss_release_as_created(client: OpenAI) -> None:
    # OpenAI's `created` is a Unix timestamp of when the model was made; 0 read as 1970.
    released = 1754352000  # 2025-08-05T00:00:00Z, gpt-oss's publication
    assert {m.created for m in client.models.list()} == {released}
    assert client.models.retrieve(MODEL).created == released


def test_healthz_is_ok(http: httpx2.Client) -> None:
    response = http.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_with_database_and_redis_up_is_200(http: httpx2.Client) -> None:
    response = http.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "redis": "ok", "broker": "ok", "event_hub": "ok"}


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probe_with_head_is_200_without_body(http: httpx2.Client, path: str) -> None:
    """Some load balancers probe with HEAD."""
    response = http.head(path)
    assert (response.status_code, response.content) == (200, b"")


def test_readyz_with_database_down_is_503(redis_url: str) -> None:
    unreachable = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing"
    settings = Settings(database_url=unreachable, redis_url=redis_url, models=[MODEL])
    for base_url in serve_in_thread(settings):
        response = httpx2.get(f"{base_url}/readyz", timeout=10)
        assert response.status_code == 503 and response.headers["retry-after"] == "5"
        assert response.json()["database"].startswith("error") and response.json()["redis"] == "ok"


def test_readyz_with_database_not_migrated_is_503(redis_url: str, tmp_path: Path) -> None:
    # The database answers, but every create would fail on its missing tables.
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'empty.db'}", redis_url=redis_url, models=[MODEL])
    for base_url in serve_in_thread(settings):
        response = httpx2.get(f"{base_url}/readyz", timeout=10)
        assert response.status_code == 503
        assert response.json()["database"] == "error: NotMigrated" and response.json()["redis"] == "ok"


def test_create_with_database_not_migrated_says_so_not_that_it_is_unreachable(
    redis_url: str, empty_database_url: str
) -> None:
    """It answered "cannot reach its database" (the configuration probe), for an operator's missing step."""
    ensure_sqlite_directory(empty_database_url)
    settings = Settings(database_url=empty_database_url, redis_url=redis_url, models=[MODEL])
    for base_url in serve_in_thread(settings):
        response = httpx2.post(f"{base_url}/v1/responses", json={"model": MODEL, "input": "hi"}, timeout=10)
        assert response.status_code == 503 and response.json()["error"]["code"] == "database_not_migrated"


@pytest.fixture
def database_behind_url(empty_database_url: str) -> str:
    """A database at migration 0009: responses.conversation_id (0010) is missing, as it is for a release
    started before its migration ran."""
    migrate(empty_database_url, "0009")
    return empty_database_url


def test_readyz_with_database_behind_this_build_is_503(redis_url: str, database_behind_url: str) -> None:
    # A new release's replicas stay out of the load balancer until its migration has run.
    settings = Settings(database_url=database_behind_url, redis_url=redis_url, models=[MODEL])
    for base_url in serve_in_thread(settings):
        response = httpx2.get(f"{base_url}/readyz", timeout=10)
        assert response.status_code == 503 and response.json()["database"] == "error: NotMigrated"


def test_retrieve_response_with_database_behind_this_build_is_503_database_not_migrated(
    redis_url: str, database_behind_url: str
) -> None:
    """It was a 500 and a traceback (PostgreSQL's UndefinedColumn, SQLite's "no such column")."""
    settings = Settings(database_url=database_behind_url, redis_url=redis_url, models=[MODEL])
    for base_url in serve_in_thread(settings):
        response = httpx2.get(f"{base_url}/v1/responses/resp_0123", timeout=10)
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "database_not_migrated"


def test_readyz_with_broker_down_is_503(database_url: str, redis_url: str) -> None:
    # Every create enqueues its task on the broker: without it the API can only answer 503s.
    settings = Settings(database_url=database_url, redis_url=redis_url, models=[MODEL],
                        broker_url=f"redis://127.0.0.1:{free_port()}/0")
    for base_url in serve_in_thread(settings):
        response = httpx2.get(f"{base_url}/readyz", timeout=10)
        assert response.status_code == 503
        assert response.json()["broker"].startswith("error") and response.json()["database"] == "ok"


def test_readyz_with_event_hub_reader_failing_is_503(
    database_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event hub whose reader keeps failing leaves every stream of this replica on keep-alives."""
    monkeypatch.setattr(EventHub, "failing", lambda hub: "the event hub's busy lane's reader failed 3 times in 60 s")
    settings = Settings(database_url=database_url, redis_url=redis_url, models=[MODEL])
    for base_url in serve_in_thread(settings):
        response = httpx2.get(f"{base_url}/readyz", timeout=10)
        assert response.status_code == 503 and response.headers["retry-after"] == "5"
        assert response.json()["event_hub"].startswith("error: the event hub's busy lane's reader failed")
        assert response.json()["redis"] == "ok"


def test_readyz_with_sqlite_file_read_only_is_503_until_it_takes_writes(redis_url: str, tmp_path: Path) -> None:
    """Every create answered 503 'refusing writes (read-only)' while /readyz said ok, so a load balancer kept
    sending them to this replica."""
    path = tmp_path / "db.sqlite"
    migrate(f"sqlite:///{path}")
    settings = Settings(database_url=f"sqlite:///{path}", redis_url=redis_url, models=[MODEL])
    for base_url in serve_in_thread(settings):
        with unwritable(path):
            refused = httpx2.get(f"{base_url}/readyz", timeout=10)
        ready = httpx2.get(f"{base_url}/readyz", timeout=10)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    assert refused.json()["database"] == "error: refusing writes (read-only)"
    assert ready.status_code == 200


def _create(base_url: str) -> httpx2.Response:
    return httpx2.post(f"{base_url}/v1/responses", json={"model": MODEL, "input": "hi", "background": True},
                       timeout=10)


def test_readyz_after_write_refused_for_full_disk_is_503_until_write_passes(redis_url: str, tmp_path: Path) -> None:
    """A full disk refuses only the writes that need room: /readyz said ok while every create answered 503
    'refusing writes (disk full)'. Its probe writes nothing, so it goes by this replica's last write."""
    with small_filesystem(tmp_path / "disk", size_kib=1024) as disk:
        url = f"sqlite:///{disk / 'db.sqlite'}"
        migrate(url)
        for base_url in serve_in_thread(Settings(database_url=url, redis_url=redis_url, models=[MODEL])):
            before = httpx2.get(f"{base_url}/readyz", timeout=10)
            filler = fill_filesystem(disk)
            create_refused = _create(base_url)
            full = httpx2.get(f"{base_url}/readyz", timeout=10)
            filler.unlink()
            freed = httpx2.get(f"{base_url}/readyz", timeout=10)  # no write has passed yet
            created = _create(base_url)
            ready = httpx2.get(f"{base_url}/readyz", timeout=10)
    assert before.status_code == 200
    assert create_refused.status_code == 503
    assert full.status_code == 503 and full.headers["retry-after"] == "5"
    assert full.json()["database"] == "error: refusing writes (disk full)"
    assert freed.json()["database"] == "error: refusing writes (disk full)"
    assert created.status_code == 200
    assert ready.status_code == 200


def test_openapi_operation_ids_are_unique(http: httpx2.Client) -> None:
    # OpenAPI requires each operationId once: the HEAD probes shared their GET's, and generated clients and
    # validators refuse such a document (FastAPI warned of it in the API's log).
    document = http.get("/openapi.json").json()
    ids = [operation["operationId"] for path in document["paths"].values() for operation in path.values()]
    assert sorted(set(ids)) == sorted(ids)
