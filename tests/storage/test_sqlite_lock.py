"""SQLite writers take turns on a file lock: a waiting writer goes on the moment the lock is free."""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import event
from support.rows import new_response
from support.sqlite_refusals import unwritable

from oss_responses.storage import Database, get_response, insert_response
from oss_responses.storage.sqlite_lock import WriterLock, is_write

HOLD_SECONDS = 0.34


def impatient(url: str) -> Database:
    """A database whose connections give up at once on SQLite's own lock (busy timeout 0): a write or
    read through it that succeeds beside a held write never slept in SQLite's busy handler, which
    retries a waiting writer only every 100 ms by then, however soon the lock is free."""
    db = Database(url)
    event.listen(db.engine, "connect", lambda connection, _record: connection.execute("PRAGMA busy_timeout=0"))
    return db


@pytest.fixture
def database_file(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "oss-responses.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


def hold_a_write(url: str, written: threading.Event, release: threading.Event, seconds: float) -> None:
    """A writer (its own engine, as another process's) that keeps its transaction open until ``release``
    is set or ``seconds`` have passed."""
    db = Database(url)
    with db.session() as session:
        insert_response(session, new_response())
        written.set()
        release.wait(seconds)
    db.dispose()


def holding(url: str, seconds: float) -> tuple[threading.Thread, threading.Event]:
    """A writer holding the lock once this returns; set the event to let it commit."""
    written, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_a_write, args=(url, written, release, seconds))
    holder.start()
    assert written.wait(5)
    return holder, release


def test_write_waits_for_other_writer_on_the_lock_not_in_sqlite(database_file: str) -> None:
    holder, _ = holding(database_file, HOLD_SECONDS)
    db, record = impatient(database_file), new_response()
    db.run(insert_response, record)  # "database is locked" had it met SQLite's lock
    holder.join()

    assert db.run(get_response, record.id) is not None
    db.dispose()


def test_read_does_not_wait_for_writer(database_file: str) -> None:
    db, record = impatient(database_file), new_response()
    db.run(insert_response, record)
    holder, release = holding(database_file, 60)
    with ThreadPoolExecutor(1) as pool:
        try:  # a read that took the lock would wait out the holder's 60 s
            found = pool.submit(db.run, get_response, record.id).result(timeout=10)
        finally:
            release.set()
            holder.join()

    assert found is not None
    db.dispose()


def test_writer_lock_is_not_taken_twice_by_one_thread(tmp_path: Path) -> None:
    lock = WriterLock(tmp_path / "db-writer.lock")
    first = lock.acquire()
    assert first is not None
    assert lock.acquire() is None  # its second connection meets SQLite's own lock instead
    lock.release(first)
    again = lock.acquire()
    assert again is not None
    lock.release(again)


@pytest.mark.parametrize(
    ("statement", "writes"),
    [("INSERT INTO r VALUES (1)", True), ("  update r set a=1", True), ("DELETE FROM r", True),
     ("SELECT * FROM r", False), ("PRAGMA journal_mode=WAL", False)],
)
def test_is_write_tells_write_statements(statement: str, writes: bool) -> None:
    assert is_write(statement) is writes


def test_write_with_lock_file_unwritable_goes_through(database_file: str) -> None:
    """A lock file that cannot be opened to write (a filesystem turned read-only, a permission change): the
    lock was opened so, and its OSError (EROFS) was a 500 in the API and a failed task in a worker."""
    db, record = Database(database_file), new_response()
    with unwritable(Path(database_file.removeprefix("sqlite:///") + "-writer.lock")):
        db.run(insert_response, record)

    assert db.run(get_response, record.id) is not None
    db.dispose()


def test_acquire_without_lock_file_leaves_write_to_sqlite(tmp_path: Path) -> None:
    """A lock file that cannot be created (missing, its folder taking no new file) is no error: SQLite's own
    lock answers, and SQLite's own error if it refuses the write."""
    assert WriterLock(tmp_path / "gone" / "db-writer.lock").acquire() is None
