"""What a process's writes to a SQLite file last met (``storage/write_refusals.py``), on a real file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from support.sqlite_refusals import fill, full_database

from oss_responses.storage import Database
from oss_responses.storage.db import refused_write
from oss_responses.storage.write_refusals import WriteRefusals, watch


@pytest.fixture
def full(tmp_path: Path) -> Iterator[tuple[Database, WriteRefusals]]:
    """A full SQLite database, watched, whose last write was refused for want of room."""
    db = full_database(tmp_path / "full.db")
    refusals = WriteRefusals()
    watch(db.engine, refusals, refused_write)
    with pytest.raises(OperationalError):
        fill(db)
    yield db, refusals
    db.dispose()


def test_refused_write_stands_as_disk_full(full: tuple[Database, WriteRefusals]) -> None:
    _, refusals = full
    assert refusals.standing(within=30) == "disk full"


def test_write_changing_a_row_ends_refusal(full: tuple[Database, WriteRefusals]) -> None:
    db, refusals = full
    with db.session() as session:
        session.execute(text("INSERT INTO filler VALUES (x'00')"))  # fits the page it has
    assert refusals.standing(within=30) is None


def test_write_changing_nothing_leaves_refusal_standing(full: tuple[Database, WriteRefusals]) -> None:
    """/readyz's probe, an UPDATE of no row, passes on a full disk: it cannot tell that room came back."""
    db, refusals = full
    with db.session() as session:
        session.execute(text("UPDATE filler SET data = data WHERE 0"))
    assert refusals.standing(within=30) == "disk full"


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
