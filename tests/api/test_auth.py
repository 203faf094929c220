"""Keys mode (``auth = "keys"``): the Bearer key, its revocation, its models and its background limit;
open mode as before. No worker: what is checked happens when a request is accepted."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor

import httpx2
import openai
import pytest
import redis as redis_lib
from openai import OpenAI
from support import MODEL
from support.api_server import ApiServer, serve_in_thread
from support.key_clients import KeyClients
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from oss_responses import redis_keys
from oss_responses.config import Settings
from oss_responses.storage import get_response

V1_ROUTES = [
    ("GET", "/v1/models", None),
    ("GET", "/v1/models/gpt-oss-20b", None),
    ("POST", "/v1/responses", {"model": MODEL, "input": "hi", "background": True}),
    ("POST", "/v1/responses/compact", {"model": MODEL, "input": "hi"}),
    ("POST", "/v1/responses/input_tokens", {"model": MODEL, "input": "hi"}),
    ("GET", "/v1/responses/resp_x", None),
    ("GET", "/v1/responses/resp_x?stream=true&starting_after=0", None),
    ("POST", "/v1/responses/resp_x/cancel", None),
    ("DELETE", "/v1/responses/resp_x", None),
    ("GET", "/v1/responses/resp_x/input_items", None),
]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"auth": "keys", "max_background_per_key": 3, "max_in_flight_per_key": 4})


def _stored(api: ApiServer) -> int:
    with api.db.engine.connect() as connection:
        return connection.exec_driver_sql("SELECT count(*) FROM responses").scalar_one()


def _invalid_key(response: httpx2.Response) -> None:
    assert response.status_code == 401
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "invalid_api_key", None)


@pytest.mark.parametrize(("method", "path", "body"), V1_ROUTES, ids=[f"{m} {p}" for m, p, _ in V1_ROUTES])
def test_v1_route_without_key_is_401(http: httpx2.Client, api: ApiServer, method: str, path: str, body: object) -> None:
    _invalid_key(http.request(method, path, json=body))
    assert _stored(api) == 0


def test_request_with_unknown_key_is_401(api: ApiServer) -> None:
    with OpenAI(base_url=f"{api.base_url}/v1", api_key="sk-oss-not-a-key", max_retries=0) as stranger, \
            pytest.raises(openai.AuthenticationError) as refused:
        stranger.responses.create(model=MODEL, input="hi", background=True)
    assert refused.value.code == "invalid_api_key"
    assert _stored(api) == 0


def test_request_with_malformed_authorization_is_401(http: httpx2.Client) -> None:
    _invalid_key(http.get("/v1/models", headers={"Authorization": "Basic dXNlcjpwYXNz"}))


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/responses/"), ("GET", "/v1/conversations/")])
def test_path_with_trailing_slash_is_404_without_redirect(http: httpx2.Client, method: str, path: str) -> None:
    answer = http.request(method, path, headers={"Host": "evil.example"})
    assert (answer.status_code, answer.headers.get("location")) == (404, None)
    assert answer.json()["error"]["type"] == "invalid_request_error"


def test_healthz_needs_no_key(http: httpx2.Client) -> None:
    assert http.get("/healthz").status_code == 200


def test_create_response_stores_owner_of_key(keys: KeyClients, api: ApiServer) -> None:
    alice = keys.new("alice")
    created = alice.sdk.responses.create(model=MODEL, input="hi", background=True)
    assert api.db.run(get_response, created.id).owner == "alice"  # type: ignore[union-attr]


def test_revoked_key_is_refused_at_once(keys: KeyClients) -> None:
    alice = keys.new("alice")
    created = alice.sdk.responses.create(model=MODEL, input="hi", background=True)
    keys.revoke(alice)
    with pytest.raises(openai.AuthenticationError):
        alice.sdk.responses.retrieve(created.id)


def test_other_key_of_same_owner_sees_its_responses(keys: KeyClients) -> None:
    first, second = keys.new("alice"), keys.new("alice")
    created = first.sdk.responses.create(model=MODEL, input="hi", background=True)
    keys.revoke(first)  # rotation: the owner's responses stay reachable with its new key
    assert second.sdk.responses.retrieve(created.id).id == created.id


def test_create_response_with_model_key_may_not_use_is_404_like_unknown_model(keys: KeyClients, api: ApiServer) -> None:
    small = keys.new("alice", models=[MODEL])
    refused = small.http.post("/v1/responses", json={"model": "gpt-oss-120b", "input": "hi", "background": True})
    unknown = small.http.post("/v1/responses", json={"model": "gpt-oss-999b", "input": "hi", "background": True})
    assert refused.status_code == unknown.status_code == 404
    assert refused.json() == unknown.json() | {
        "error": unknown.json()["error"] | {"message": "The model 'gpt-oss-120b' does not exist."}
    }
    assert refused.json()["error"]["code"] == "model_not_found"
    assert _stored(api) == 0


def test_list_models_lists_only_models_of_key(keys: KeyClients) -> None:
    assert [m.id for m in keys.new("alice", models=["gpt-oss-120b"]).sdk.models.list()] == ["gpt-oss-120b"]
    assert [m.id for m in keys.new("bob").sdk.models.list()] == [MODEL, "gpt-oss-120b"]


def test_retrieve_model_key_may_not_use_is_404(keys: KeyClients) -> None:
    small = keys.new("alice", models=[MODEL])
    with pytest.raises(openai.NotFoundError):
        small.sdk.models.retrieve("gpt-oss-120b")
    assert small.sdk.models.retrieve(MODEL).id == MODEL


def test_background_over_key_limit_is_429_and_stores_nothing(
    keys: KeyClients, api: ApiServer, redis: redis_lib.Redis
) -> None:
    alice = keys.new("alice", max_background=2)
    accepted = [alice.sdk.responses.create(model=MODEL, input="hi", background=True) for _ in range(2)]
    queue = api.settings.queue_for(MODEL)
    streams = set(redis.scan_iter(redis_keys.events("*")))

    refused = alice.http.post("/v1/responses", json={"model": MODEL, "input": "third", "background": True})

    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) == api.settings.background_limit_retry_after_seconds
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "too_many_background_responses")
    assert _stored(api) == 2
    assert set(redis.scan_iter(redis_keys.events("*"))) == streams
    assert redis.llen(queue) == 2
    assert [r.status for r in accepted] == ["queued", "queued"]


def test_background_limit_frees_a_slot_when_one_ends(keys: KeyClients) -> None:
    alice = keys.new("alice", max_background=1)
    first = alice.sdk.responses.create(model=MODEL, input="hi", background=True)
    with pytest.raises(openai.RateLimitError):
        alice.sdk.responses.create(model=MODEL, input="hi", background=True)
    alice.sdk.responses.cancel(first.id)
    assert alice.sdk.responses.create(model=MODEL, input="hi", background=True).status == "queued"


def test_background_limit_is_per_owner(keys: KeyClients) -> None:
    alice, bob = keys.new("alice", max_background=1), keys.new("bob", max_background=1)
    alice.sdk.responses.create(model=MODEL, input="hi", background=True)
    assert bob.sdk.responses.create(model=MODEL, input="hi", background=True).status == "queued"


def test_background_limit_default_comes_from_settings(keys: KeyClients, api: ApiServer) -> None:
    alice = keys.new("alice")  # no limit of its own: max_background_per_key (3)
    for _ in range(3):
        alice.sdk.responses.create(model=MODEL, input="hi", background=True)
    with pytest.raises(openai.RateLimitError):
        alice.sdk.responses.create(model=MODEL, input="hi", background=True)
    assert _stored(api) == 3


def test_background_limit_holds_under_concurrent_creates(keys: KeyClients, api: ApiServer) -> None:
    alice = keys.new("alice", max_background=3)

    def create(_: int) -> int:
        return alice.http.post("/v1/responses", json={"model": MODEL, "input": "hi", "background": True}).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = sorted(pool.map(create, range(8)))
    assert statuses == [200] * 3 + [429] * 5
    assert _stored(api) == 3


@pytest.mark.parametrize("kind", [{"stream": True}, {"background": True}])
def test_response_over_key_in_flight_limit_is_429_whatever_its_kind(
    keys: KeyClients, api: ApiServer, kind: dict[str, bool]
) -> None:
    """Streamed responses take workers as background ones do: the owner's limit counts both (4 here)."""
    alice = keys.new("alice", max_background=10)
    for _ in range(4):
        alice.sdk.responses.create(model=MODEL, input="hi", background=True)

    refused = alice.http.post("/v1/responses", json={"model": MODEL, "input": "fifth"} | kind)

    assert refused.status_code == 429 and "Retry-After" in refused.headers
    assert refused.json()["error"]["code"] == "too_many_responses_in_flight"
    assert _stored(api) == 4


def test_open_mode_needs_no_key_and_shows_every_response(database_url: str, redis_url: str) -> None:
    settings = Settings(database_url=database_url, redis_url=redis_url, models=[MODEL])
    for base_url in serve_in_thread(settings):
        with OpenAI(base_url=f"{base_url}/v1", api_key="one", max_retries=0) as one, \
                OpenAI(base_url=f"{base_url}/v1", api_key="two", max_retries=0) as two:
            created = one.responses.create(model=MODEL, input="hi", background=True)
            assert two.responses.retrieve(created.id).id == created.id


def test_open_mode_logs_warning_at_start(database_url: str, redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(database_url=database_url, redis_url=redis_url, models=[MODEL])
    with caplog.at_level(logging.WARNING, logger="oss_responses.api.auth"):
        for _ in serve_in_thread(settings):
            pass
    assert any("OSS_RESPONSES_AUTH=open" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_keys_mode_logs_no_open_warning(settings: Settings, redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="oss_responses.api.auth"):
        for _ in serve_in_thread(settings):
            pass
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "oss_responses.api.auth"]


def _socket(api: ApiServer, secret: str | None = None) -> ClientConnection:
    headers = {"Authorization": f"Bearer {secret}"} if secret else None
    return connect(api.base_url.replace("http://", "ws://") + "/v1/responses", additional_headers=headers)


@pytest.mark.parametrize("secret", [None, "sk-oss-not-a-key"], ids=["no key", "unknown key"])
def test_socket_handshake_without_valid_key_is_401(api: ApiServer, secret: str | None) -> None:
    with pytest.raises(InvalidStatus) as refused:
        _socket(api, secret)
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body or b"")["error"]["code"] == "invalid_api_key"


def test_socket_create_uses_only_models_of_key(keys: KeyClients, api: ApiServer) -> None:
    small = keys.new("alice", models=[MODEL])
    with _socket(api, small.secret) as socket:
        socket.send(json.dumps({"type": "response.create", "model": "gpt-oss-120b", "input": "hi"}))
        refused = json.loads(socket.recv(timeout=10))
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi", "generate": False}))
        accepted = json.loads(socket.recv(timeout=10))
    assert (refused["status"], refused["error"]["code"]) == (404, "model_not_found")
    assert accepted["type"] == "response.created"
    assert _stored(api) == 0


def test_socket_create_after_key_revoked_is_401(keys: KeyClients, api: ApiServer) -> None:
    alice = keys.new("alice")
    with _socket(api, alice.secret) as socket:
        keys.revoke(alice)
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi", "generate": False}))
        refused = json.loads(socket.recv(timeout=10))
    assert (refused["status"], refused["error"]["code"]) == (401, "invalid_api_key")
