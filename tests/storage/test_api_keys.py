"""``storage/api_keys.py`` and the owner's background count of ``storage/responses.py``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select
from support.rows import new_response

from oss_responses.keys.tokens import hash_secret
from oss_responses.storage import (
    ApiKeyRow,
    Database,
    InFlightLimitReached,
    count_in_flight,
    create_api_key,
    find_active_key,
    get_response,
    insert_accepted,
    insert_response,
    list_api_keys,
    revoke_api_key,
)


def test_create_api_key_stores_hash_of_secret_only(db: Database) -> None:
    record, secret = db.run(create_api_key, "acme", models=["gpt-oss-20b"], max_background=4)
    with db.engine.connect() as connection:
        [row] = connection.execute(select(ApiKeyRow.__table__)).mappings().all()
    assert row["secret_hash"] == hash_secret(secret)
    assert secret not in {str(value) for value in row.values()}
    assert (row["id"], row["owner"], row["models"], row["max_background"]) == (record.id, "acme", ["gpt-oss-20b"], 4)


def test_create_api_key_makes_distinct_high_entropy_secrets(db: Database) -> None:
    secrets = {db.run(create_api_key, "acme")[1] for _ in range(5)}
    assert len(secrets) == 5
    assert all(secret.startswith("sk-") and len(secret) >= 40 for secret in secrets)


def test_find_active_key_returns_key_of_secret(db: Database) -> None:
    record, secret = db.run(create_api_key, "acme")
    assert db.run(find_active_key, secret) == record


def test_find_active_key_unknown_secret_is_none(db: Database) -> None:
    db.run(create_api_key, "acme")
    assert db.run(find_active_key, "sk-oss-unknown") is None


def test_revoke_api_key_hides_key_from_next_lookup(db: Database) -> None:
    record, secret = db.run(create_api_key, "acme")
    assert db.run(revoke_api_key, record.id) is True
    assert db.run(find_active_key, secret) is None


def test_revoke_api_key_twice_or_unknown_is_false(db: Database) -> None:
    record, _ = db.run(create_api_key, "acme")
    db.run(revoke_api_key, record.id)
    assert db.run(revoke_api_key, record.id) is False
    assert db.run(revoke_api_key, "key_unknown") is False


def test_list_api_keys_in_creation_order_with_revocations(db: Database) -> None:
    first, _ = db.run(create_api_key, "acme")
    second, _ = db.run(create_api_key, "umbrella", models=["gpt-oss-120b"])
    db.run(revoke_api_key, first.id)
    listed = db.run(list_api_keys)
    assert [(k.id, k.owner, k.is_revoked) for k in listed] == [(first.id, "acme", True), (second.id, "umbrella", False)]


def test_count_in_flight_counts_owner_active_responses_of_either_kind(db: Database) -> None:
    db.run(insert_response, new_response(owner="acme"))
    db.run(insert_response, new_response(owner="acme", status="in_progress"))
    db.run(insert_response, new_response(owner="acme", status="completed"))
    db.run(insert_response, new_response(owner="acme", background=False))
    db.run(insert_response, new_response(owner="umbrella"))
    db.run(insert_response, new_response())
    assert db.run(count_in_flight, "acme") == (3, 2)


def test_insert_accepted_background_refuses_over_limit_and_inserts_nothing(db: Database) -> None:
    db.run(create_api_key, "acme")
    db.run(insert_accepted, new_response(owner="acme"), [], background_limit=1)
    refused = new_response(owner="acme")
    with pytest.raises(InFlightLimitReached):
        db.run(insert_accepted, refused, [{"id": "msg_1", "type": "message"}], background_limit=1)
    assert db.run(get_response, refused.id) is None
    assert db.run(count_in_flight, "acme") == (1, 1)


def test_insert_accepted_streamed_refuses_over_in_flight_limit(db: Database) -> None:
    """One owner's streamed responses are limited too: they take workers as background ones do."""
    db.run(create_api_key, "acme")
    db.run(insert_accepted, new_response(owner="acme", background=False), [], background_limit=5, in_flight_limit=1)
    refused = new_response(owner="acme", background=False)
    with pytest.raises(InFlightLimitReached) as raised:
        db.run(insert_accepted, refused, [], background_limit=5, in_flight_limit=1)
    assert db.run(get_response, refused.id) is None and not raised.value.background


def test_insert_accepted_background_holds_under_concurrency(db: Database) -> None:
    db.run(create_api_key, "acme")

    def insert(_: int) -> bool:
        try:
            db.run(insert_accepted, new_response(owner="acme"), [], background_limit=3)
        except InFlightLimitReached:
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        accepted = sum(pool.map(insert, range(16)))
    assert accepted == 3
    assert db.run(count_in_flight, "acme") == (3, 3)
