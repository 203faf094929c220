"""Schema migrations: ``alembic upgrade`` run from Python with the caller's URL.

The Alembic scripts (``env.py``, ``versions/``) live in this package, so an installed wheel carries
them; ``alembic.ini`` at the repository root points ``alembic`` on the command line here too.

Alembic is imported by the functions that run it, not with the package: the API and every worker import
``oss_responses.storage`` and never migrate, and alembic (with mako and tomllib) cost each of their
starts ~0.2 s.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import URL, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from oss_responses.storage.db import Database, ensure_sqlite_directory

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent


def alembic_config(url: str | URL) -> Config:
    """An Alembic config without alembic.ini: env.py reads the URL from ``attributes``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["database_url"] = url
    return config


def migrate(url: str | URL, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision`` (creating a SQLite file's folder if needed)."""
    from alembic import command

    ensure_sqlite_directory(url)
    command.upgrade(alembic_config(url), revision)


def head_revision() -> str | None:
    """The newest revision the migrations of this build know."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()


@cache
def _known_revisions() -> frozenset[str]:
    """The revisions of this build, from its scripts' names (``0011_conversation_next_position.py``):
    without importing alembic, which the API does not load."""
    return frozenset(path.name[:4] for path in (MIGRATIONS_DIR / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))


def newest_revision() -> str:
    """This build's newest revision, from its scripts' names (no alembic import)."""
    return max(_known_revisions())


def database_revision(session: Session) -> str | None:
    """The revision the session's database is at; None when it was never migrated (no ``alembic_version``).
    Raises what the database raised for anything else (it did not answer)."""
    try:
        return session.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except DBAPIError as exc:
        if "alembic_version" not in str(exc):  # not the missing table: the database did not answer
            raise
        return None


def schema_behind(revision: str | None) -> bool:
    """Is a database at ``revision`` older than this build's code (never migrated, or a revision this
    build knows that is not its newest)? A revision it does not know is newer: during a rolling upgrade
    the previous release runs on the next one's schema, which only adds to it."""
    return revision is None or (revision in _known_revisions() and revision != newest_revision())


def schema_newer(revision: str | None) -> bool:
    """Was the database at ``revision`` migrated by a newer release than this one (a revision this build
    does not know, past its newest)? This release runs on it: every migration only adds (README: upgrading
    a running deployment), so a rollback needs nothing of its ``migrate``."""
    return revision is not None and revision not in _known_revisions() and revision > newest_revision()


def current_revision(url: str | URL) -> str | None:
    """The revision the database at ``url`` is at (None: never migrated). Connects; raises if it cannot."""
    from alembic.runtime.migration import MigrationContext

    database = Database(url)
    try:
        with database.engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        database.dispose()
