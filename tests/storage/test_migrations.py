from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from support.rows import new_response

from oss_responses.storage import Base, Database, find_stored_items, insert_response, migrate, transition
from oss_responses.storage.migrations import alembic_config

REPO = Path(__file__).resolve().parents[2]


def table_names(url: str) -> set[str]:
    database = Database(url)
    try:
        with database.engine.connect() as connection:
            return set(inspect(connection).get_table_names())
    finally:
        database.dispose()


def schema_differences(url: str) -> list[object]:
    database = Database(url)
    try:
        with database.engine.connect() as connection:
            return compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        database.dispose()


def test_migrate_creates_tables_from_empty(empty_database_url: str) -> None:
    migrate(empty_database_url)

    assert table_names(empty_database_url) == {
        "alembic_version", "responses", "input_items", "output_items", "event_logs", "webhook_deliveries", "api_keys",
    }


def test_migrate_yields_schema_of_models(empty_database_url: str) -> None:
    migrate(empty_database_url)

    assert schema_differences(empty_database_url) == []


def test_migrate_is_idempotent(empty_database_url: str) -> None:
    migrate(empty_database_url)
    migrate(empty_database_url)

    assert schema_differences(empty_database_url) == []


def test_downgrade_removes_tables(empty_database_url: str) -> None:
    migrate(empty_database_url)

    command.downgrade(alembic_config(empty_database_url), "base")

    assert table_names(empty_database_url) == {"alembic_version"}


def test_cli_migrates_database(empty_database_url: str) -> None:
    env = os.environ | {"OSS_RESPONSES_DATABASE_URL": empty_database_url}
    subprocess.run([sys.executable, "-m", "oss_responses.storage", "migrate"], cwd=REPO, env=env, check=True)

    assert "responses" in table_names(empty_database_url)


def test_alembic_command_line_migrates_database(empty_database_url: str) -> None:
    alembic = Path(sys.executable).parent / "alembic"
    subprocess.run([str(alembic), "-x", f"url={empty_database_url}", "upgrade", "head"], cwd=REPO, check=True,
                   capture_output=True)

    assert "responses" in table_names(empty_database_url)


def test_upgrade_indexes_output_items_of_responses_that_ended_before(empty_database_url: str) -> None:
    command.upgrade(alembic_config(empty_database_url), "0006")
    database = Database(empty_database_url)
    try:
        ended, running = new_response(), new_response()
        item = {"id": "msg_out", "type": "message", "role": "assistant", "content": []}
        for record in (ended, running):
            database.run(insert_response, record)
        database.run(transition, ended.id, from_statuses=("queued",), to_status="completed",
                     response={"id": ended.id, "status": "completed", "output": [item]})
        migrate(empty_database_url)
        assert database.run(find_stored_items, ["msg_out"], None) == {"msg_out": item}
    finally:
        database.dispose()
