"""Sealed blobs: the ``encrypted_content`` of reasoning and compaction items.

A blob is a Fernet token (AES-128-CBC + HMAC-SHA256, authenticated) over a versioned JSON payload
``{"v": 1, "kind": "reasoning" | "compaction", "messages": [harmony message dicts]}``: the exact
harmony messages the item stands for (a reasoning item: its analysis message, after any messages of the
turn that no item shows, such as a call to a tool not offered), so a client that replays the item
(``store: false``) renders byte-identical prompt tokens. The kind is inside the authenticated payload,
so a compaction blob cannot be passed off as reasoning or the other way round; so is the owner of the
key that made it (keys mode: ``"owner"``), so a blob opens only for that owner's keys: a blob leaked to
another tenant, and replayed with its key, is refused like a tampered one (it would have had the model
read out the owner's reasoning). Blobs sealed with no owner (open mode, and those sealed before owners
were bound) open for anyone.

Keys rotate: the first configured key seals, every key opens (``MultiFernet``); prepend a new key,
keep the old ones until the blobs sealed with them are no longer replayed, then drop them. A blob
that does not open (tampered, sealed by another deployment, a dropped key, a kind mismatch, an
unknown version) opens to ``None``; callers turn that into the client's 400.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

SealedKind = Literal["reasoning", "compaction", "mcp_secrets"]
PAYLOAD_VERSION = 1


def new_key() -> str:
    """A fresh key in the form ``OSS_RESPONSES_ENCRYPTION_KEYS`` takes (url-safe base64 of 32 bytes)."""
    return Fernet.generate_key().decode("ascii")


def check_key(key: str) -> str:
    """``key`` if it is a usable key; ValueError (without the key in it) if not."""
    try:
        Fernet(key.encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValueError("an encryption key must be 32 url-safe base64-encoded bytes (see new_key())") from exc
    return key


class Sealer:
    """Seals and opens harmony messages under the configured keys (the first one seals)."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("a Sealer needs at least one key")
        self._fernet = MultiFernet([Fernet(check_key(key).encode("ascii")) for key in keys])

    def seal(self, kind: SealedKind, messages: list[dict[str, Any]], owner: str | None = None) -> str:
        payload: dict[str, Any] = {"v": PAYLOAD_VERSION, "kind": kind, "messages": messages}
        if owner is not None:
            payload["owner"] = owner
        data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        return self._fernet.encrypt(data).decode("ascii")

    def open(self, kind: SealedKind, blob: str, owner: str | None = None) -> list[dict[str, Any]] | None:
        """The sealed messages, or None if the blob is not one of ours of this kind, for this owner."""
        try:
            payload = json.loads(self._fernet.decrypt(blob.encode("ascii")))
        except (InvalidToken, UnicodeEncodeError, ValueError):
            return None
        if not isinstance(payload, dict) or payload.get("v") != PAYLOAD_VERSION or payload.get("kind") != kind:
            return None
        if payload.get("owner", owner) != owner:
            return None
        messages = payload.get("messages")
        return messages if isinstance(messages, list) else None

    def sealing(self, kind: SealedKind, owner: str | None = None) -> Callable[[list[dict[str, Any]]], str]:
        return lambda messages: self.seal(kind, messages, owner)

    def opening(self, owner: str | None) -> Callable[[Literal["reasoning", "compaction"], str], Any]:
        """``open`` for this owner's blobs: what a render's ``unseal`` is."""
        return lambda kind, blob: self.open(kind, blob, owner)



def seal_secrets(sealer: Sealer, secrets: dict[str, dict[str, Any]]) -> str:
    """A request's MCP credentials (by server label), sealed to be stored beside the response."""
    return sealer.seal("mcp_secrets", [{"server_label": label, **fields} for label, fields in secrets.items()])


def open_secrets(sealer: Sealer, blob: str) -> dict[str, dict[str, Any]] | None:
    """The credentials by server label, or None if the blob does not open under these keys."""
    entries = sealer.open("mcp_secrets", blob)
    if entries is None:
        return None
    return {entry["server_label"]: {k: v for k, v in entry.items() if k != "server_label"} for entry in entries}


def build_sealer(keys: Sequence[str]) -> Sealer | None:
    """None when no key is configured: sealed items are then refused (see README)."""
    return Sealer(keys) if keys else None
