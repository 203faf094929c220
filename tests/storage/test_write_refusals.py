"""What a process's writes to a SQLite file last met (``storage/write_refusals.py``), on a real file."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from support.sqlite_refusals import fill, full_database

from oss_responses.storage import Database
from oss_responses.storage.db import refused_write
from oss_responses.storage.write_refusals import WriteRefusals, watch


def _watched(db: Database) -> WriteRefusals:
    refusals = WriteRefusals()
    watch(db.engine, refusals, refused_write)
    return refusals


def test_refused_write_stands_as_disk_full(tmp_path: Path) -> None:
    db = full_database(tmp_path / "full.db")
    refusals = _watched(db)
    try:
        with pytest.raises(OperationalError):
            fill(db)
        assert refusals.standing(within=30) == "disk full"
    finally:
        db.dispose()


def test_write_changing_a_row_ends_refusal(tmp_path: Path) -> None:
    db = full_database(tmp_path / "full.db")
    refusals = _watched(db)
    try:
        with pytest.raises(OperationalError):
            fill(db)
        with db.session() as session:
            session.execute(text("INSERT INTO filler VALUES (x'00')"))  # fits the page it has
        assert refusals.standing(within=30) is None
    finally:
        db.dispose()


def test_write_changing_nothing_leaves_refusal_standing(tmp_path: Path) -> None:
    """/readyz's probe, an UPDATE of no row, passes on a full disk: it cannot tell that room came back."""
    db = full_database(tmp_path / "full.db")
    refusals = _watched(db)
    try:
        with pytest.raises(OperationalError):
            fill(db)
        with db.session() as session:
            session.execute(text("UPDATE filler SET data = data WHERE 0"))
        assert refusals.standing(within=30) == "disk full"
    finally:
        db.dispose()


def test_refusal_lapses_after_its_hold() -> None:
    now = [100.0]
    refusals = WriteRefusals(clock=lambda: now[0])
    refusals.refused("disk full")
    now[0] += 30.5
    assert refusals.standing(within=30) is None


def test_write_lock_taken_ends_read_only_refusal_not_disk_full() -> None:
    refusals = WriteRefusals()
    refusals.refused("read-only")
    refusals.took_write_lock()
    assert refusals.standing(within=30) is None
    refusals.refused("disk full")
    refusals.took_write_lock()
    assert refusals.standing(within=30) == "disk full"
