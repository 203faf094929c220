"""Alembic environment. The database URL comes from the caller, in this order:
``config.attributes["database_url"]`` (``oss_responses.storage.migrate(url)``), ``-x url=...`` on the
command line, then the settings (``OSS_RESPONSES_DATABASE_URL``), read only when a migration runs.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from oss_responses.storage.db import Database, sync_url
from oss_responses.storage.migrations.lock import one_migration_at_a_time
from oss_responses.storage.models import Base

config = context.config


def _database_url() -> str:
    url = config.attributes.get("database_url") or context.get_x_argument(as_dictionary=True).get("url")
    if url is None:
        from oss_responses.config import get_settings

        url = get_settings().database_url
    return sync_url(url).render_as_string(hide_password=False)


def run_offline(url: str) -> None:
    context.configure(url=url, target_metadata=Base.metadata, literal_binds=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online(url: str) -> None:
    database = Database(url)
    try:
        with database.engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=Base.metadata,
                compare_type=True,
                render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying
            )
            with context.begin_transaction(), one_migration_at_a_time(connection):
                context.run_migrations()
    finally:
        database.dispose()


if config.config_file_name is not None and "database_url" not in config.attributes:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

if context.is_offline_mode():
    run_offline(_database_url())
else:
    run_online(_database_url())
