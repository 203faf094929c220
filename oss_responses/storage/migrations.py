"""Schema migrations: ``alembic upgrade`` run from Python with the caller's URL."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import URL

from oss_responses.storage.db import ensure_sqlite_directory

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str | URL) -> Config:
    """An Alembic config without alembic.ini: migrations/env.py reads the URL from ``attributes``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["database_url"] = url
    return config


def migrate(url: str | URL, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision`` (creating a SQLite file's folder if needed)."""
    ensure_sqlite_directory(url)
    command.upgrade(alembic_config(url), revision)
