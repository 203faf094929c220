"""Sealed blobs (``encrypted_content``): authenticated, versioned, bound to their kind, keys rotate."""

from __future__ import annotations

import pytest

from oss_responses.harmony.messages import text_message
from oss_responses.sealing import Sealer, build_sealer, new_key

MESSAGES = [text_message("assistant", "Need the weather; call get_weather for Paris.", channel="analysis")]


def test_open_sealed_messages_round_trip() -> None:
    sealer = Sealer([new_key()])
    assert sealer.open("reasoning", sealer.seal("reasoning", MESSAGES)) == MESSAGES


def test_open_blob_sealed_before_rotation_with_old_key_kept() -> None:
    old, new = new_key(), new_key()
    blob = Sealer([old]).seal("reasoning", MESSAGES)
    assert Sealer([new, old]).open("reasoning", blob) == MESSAGES


def test_seal_after_rotation_uses_first_key() -> None:
    old, new = new_key(), new_key()
    blob = Sealer([new, old]).seal("reasoning", MESSAGES)
    assert Sealer([new]).open("reasoning", blob) == MESSAGES
    assert Sealer([old]).open("reasoning", blob) is None


def test_open_blob_of_its_owner_round_trips() -> None:
    sealer = Sealer([new_key()])
    assert sealer.open("reasoning", sealer.seal("reasoning", MESSAGES, "alice"), "alice") == MESSAGES


@pytest.mark.parametrize("opener", ["bob", None])
def test_open_blob_of_another_owner_is_refused(opener: str | None) -> None:
    sealer = Sealer([new_key()])
    assert sealer.open("reasoning", sealer.seal("reasoning", MESSAGES, "alice"), opener) is None


def test_open_blob_sealed_without_owner_opens_for_any_owner() -> None:
    # Open mode's blobs, and those sealed before owners were bound into them.
    sealer = Sealer([new_key()])
    assert sealer.open("reasoning", sealer.seal("reasoning", MESSAGES), "bob") == MESSAGES


def test_open_tampered_blob_is_refused() -> None:
    sealer = Sealer([new_key()])
    blob = sealer.seal("reasoning", MESSAGES)
    middle = len(blob) // 2
    tampered = blob[:middle] + ("A" if blob[middle] != "A" else "B") + blob[middle + 1:]
    assert sealer.open("reasoning", tampered) is None


def test_open_foreign_deployment_blob_is_refused() -> None:
    foreign = Sealer([new_key()]).seal("reasoning", MESSAGES)
    assert Sealer([new_key()]).open("reasoning", foreign) is None


def test_open_blob_of_other_kind_is_refused() -> None:
    sealer = Sealer([new_key()])
    assert sealer.open("reasoning", sealer.seal("compaction", MESSAGES)) is None


def test_open_garbage_is_refused() -> None:
    assert Sealer([new_key()]).open("reasoning", "not a blob ✓") is None


def test_build_sealer_without_keys_is_none() -> None:
    assert build_sealer([]) is None


def test_sealer_refuses_malformed_key_without_echoing_it() -> None:
    with pytest.raises(ValueError) as raised:
        Sealer(["s3cret-but-not-a-key"])
    assert "s3cret" not in str(raised.value)
