"""An owner holds at most ``max_streams_per_key`` event streams open on one API process (keys mode)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select
from support import MODEL
from support.api_server import ApiServer
from support.key_clients import KeyClient
from websockets.exceptions import InvalidStatus
from websockets.sync import client as ws_client

from oss_responses.api.auth import Owner
from oss_responses.api.stream_slots import StreamSlots
from oss_responses.config import Settings
from oss_responses.errors import TooManyRequests
from oss_responses.storage import ResponseRow

LIMIT = 2


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"auth": "keys", "max_streams_per_key": LIMIT})


def test_slots_are_counted_per_owner_and_given_back_once() -> None:
    slots = StreamSlots(LIMIT)
    alice, bob = Owner(name="alice"), Owner(name="bob")
    first, _ = slots.take(alice), slots.take(alice)
    with pytest.raises(TooManyRequests) as refused:
        slots.take(alice)
    assert refused.value.code == "too_many_streams" and refused.value.headers == {"Retry-After": "5"}
    slots.take(bob)
    first()
    first()
    assert slots.open_for("alice") == 1
    slots.take(alice)


def test_slots_do_not_limit_open_mode_or_a_limit_of_zero() -> None:
    for slots, owner in ((StreamSlots(LIMIT), Owner(name=None)), (StreamSlots(0), Owner(name="alice"))):
        for _ in range(LIMIT + 3):
            slots.take(owner)


def test_stream_past_owner_limit_is_429_and_other_owners_are_not(
    api: ApiServer, alice: KeyClient, bob: KeyClient
) -> None:
    """The security probe held 800 followers of one response; every other owner's requests took seconds."""
    queued = alice.sdk.responses.create(model=MODEL, input="hi", background=True).id  # no worker: it stays open
    url = f"/v1/responses/{queued}?stream=true"
    with alice.http.stream("GET", url) as one, alice.http.stream("GET", url) as two:
        assert one.status_code == two.status_code == 200
        third = alice.http.get(url)
        assert third.status_code == 429 and third.json()["error"]["code"] == "too_many_streams"
        assert third.headers["retry-after"] == "5"
        created = alice.http.post("/v1/responses", json={"model": MODEL, "input": "x", "stream": True})
        assert created.status_code == 429
        with api.db.session() as session:  # the refused create stored nothing
            assert session.scalar(select(func.count()).select_from(ResponseRow)) == 1
        with pytest.raises(InvalidStatus) as denied:
            ws_client.connect(str(alice.http.base_url).rstrip("/").replace("http://", "ws://") + "/v1/responses",
                              additional_headers={"Authorization": f"Bearer {alice.secret}"})
        assert denied.value.response.status_code == 429
        theirs = bob.sdk.responses.create(model=MODEL, input="hi", background=True).id
        with bob.http.stream("GET", f"/v1/responses/{theirs}?stream=true") as bobs:
            assert bobs.status_code == 200
    deadline = time.monotonic() + 5
    while (again := _stream_status(alice, url)) == 429 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert again == 200


def _stream_status(client: KeyClient, url: str) -> int:
    with client.http.stream("GET", url) as response:
        return response.status_code
