"""Data access for ``api_keys``: sync functions taking a ``Session`` inside the caller's transaction.

A key is found by the hash of its secret (``keys/tokens.py``); a revoked key is never found, and
nothing caches a lookup, so a revocation holds from the next request on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import CursorResult, RowMapping, Table, insert, select, update
from sqlalchemy.orm import Session

from oss_responses.keys.tokens import hash_secret, new_key_id, new_secret
from oss_responses.storage.models import ApiKeyRow
from oss_responses.storage.records import ApiKeyRecord, utcnow

_api_keys = cast(Table, ApiKeyRow.__table__)


def create_api_key(
    session: Session, owner: str, *, models: Sequence[str] | None = None, max_background: int | None = None
) -> tuple[ApiKeyRecord, str]:
    """A new key of ``owner`` and its secret (the only time the secret exists outside the client)."""
    secret = new_secret()
    record = ApiKeyRecord(id=new_key_id(), owner=owner, models=list(models) if models is not None else None,
                          max_background=max_background, created_at=utcnow())
    session.execute(insert(_api_keys).values(
        id=record.id, owner=owner, secret_hash=hash_secret(secret), models=record.models,
        max_background=max_background, created_at=record.created_at,
    ))
    return record, secret


def find_active_key(session: Session, secret: str) -> ApiKeyRecord | None:
    """The unrevoked key whose secret this is, or None."""
    query = select(_api_keys).where(_api_keys.c.secret_hash == hash_secret(secret), _api_keys.c.revoked_at.is_(None))
    row = session.execute(query).mappings().first()
    return _record(row) if row is not None else None


def list_api_keys(session: Session) -> list[ApiKeyRecord]:
    query = select(_api_keys).order_by(_api_keys.c.created_at, _api_keys.c.id)
    return [_record(row) for row in session.execute(query).mappings()]


def revoke_api_key(session: Session, key_id: str) -> bool:
    """Revoke a key (True), or False if there is no such key or it was already revoked."""
    statement = (
        update(_api_keys).where(_api_keys.c.id == key_id, _api_keys.c.revoked_at.is_(None)).values(revoked_at=utcnow())
    )
    return cast(CursorResult[Any], session.execute(statement)).rowcount == 1


def lock_owner_keys(session: Session, owner: str) -> None:
    """Hold the owner's key rows until the transaction ends, so that two accepts of one owner count
    its responses in flight one after the other (PostgreSQL; SQLite serialises writers anyway)."""
    session.execute(select(_api_keys.c.id).where(_api_keys.c.owner == owner).order_by(_api_keys.c.id).with_for_update())


def _record(row: RowMapping) -> ApiKeyRecord:
    return ApiKeyRecord(id=row["id"], owner=row["owner"], models=row["models"], max_background=row["max_background"],
                        created_at=row["created_at"], revoked_at=row["revoked_at"])
