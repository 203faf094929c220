"""GET /v1/models, /healthz and /readyz."""

from __future__ import annotations

import httpx2
import openai
import pytest
from openai import OpenAI
from support import MODEL
from support.api_server import serve_in_thread
from support.servers import free_port

from oss_responses.config import Settings


def test_list_models_returns_configured_models(client: OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models] == [MODEL, "gpt-oss-120b"]
    assert all(m.object == "model" and m.owned_by for m in models)


def test_retrieve_model_known_and_unknown(client: OpenAI) -> None:
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-9")


def test_healthz_is_ok(http: httpx2.Client) -> None:
    response = http.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_with_database_and_redis_up_is_200(http: httpx2.Client) -> None:
    response = http.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "redis": "ok"}


def test_readyz_with_database_down_is_503(redis_url: str) -> None:
    unreachable = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing"
    settings = Settings(database_url=unreachable, redis_url=redis_url, models=[MODEL])
    for base_url in serve_in_thread(settings):
        response = httpx2.get(f"{base_url}/readyz", timeout=10)
        assert response.status_code == 503
        assert response.json()["database"].startswith("error") and response.json()["redis"] == "ok"
