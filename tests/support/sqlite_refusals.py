"""A real SQLite file that refuses writes, as a full disk or a read-only file does, for the tests of what
the service does then (``storage/db.py`` ``refused_write``)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from oss_responses.storage import Database


def full_database(path: Path) -> Database:
    """A database on ``path`` holding one table ``filler(data)``, whose connections are held to the pages
    it has (``PRAGMA max_page_count``): a write that needs one more page meets SQLITE_FULL, "database or
    disk is full", exactly as on a full disk."""
    db = Database(f"sqlite:///{path}")
    with db.session() as session:
        session.execute(text("CREATE TABLE filler (data BLOB)"))

    def hold_to_its_pages(connection: Any, _record: Any) -> None:
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count={pages}")

    db.dispose()
    event.listen(db.engine, "connect", hold_to_its_pages)
    return db


def fill(db: Database) -> None:
    """A write that needs more pages than ``db`` (a :func:`full_database`) may have."""
    with db.session() as session:
        session.execute(text("INSERT INTO filler VALUES (randomblob(100000))"))


@contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """``path`` (a file) refuses to be opened for writing, as on a filesystem turned read-only: immutable
    (``chattr +i``) for root, whom permissions do not stop, read-only permissions for anyone else."""
    path.touch()
    if os.geteuid() != 0:
        path.chmod(0o444)
        yield
        path.chmod(0o644)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode != 0:
        # Root ignores permissions: only an immutable file refuses it, and some filesystems (tmpfs before 6.0,
        # overlayfs) cannot make one. This machine and CI run it (ext4).
        pytest.skip("running as root on a filesystem without `chattr +i`: no file here refuses root a write")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


@contextmanager
def small_filesystem(path: Path, size_kib: int) -> Iterator[Path]:
    """A filesystem of ``size_kib`` KiB mounted on ``path`` (a tmpfs): a disk that really fills, for root only."""
    if os.geteuid() != 0:
        pytest.skip("mounting a filesystem needs root")
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:  # a container without CAP_SYS_ADMIN
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def fill_filesystem(folder: Path) -> Path:
    """A file taking every free block of ``folder``'s filesystem, to delete for room again."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return filler
