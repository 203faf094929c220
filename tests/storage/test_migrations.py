from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import MetaData, Table, insert, inspect, text
from sqlalchemy.orm import Session
from support.rows import new_response

from oss_responses.storage import Base, Database, ResponseRecord, find_stored_items, get_response, migrate
from oss_responses.storage.migrations import alembic_config, head_revision, schema_behind
from oss_responses.storage.migrations.lock import one_migration_at_a_time

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
        "conversations", "conversation_items",
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


def test_concurrent_migrations_of_one_database_all_succeed(empty_database_url: str) -> None:
    """A deploy's replicas may each migrate at once: all but one failed on what the first had created
    (PostgreSQL: 7 of 12 processes in the configuration probe; SQLite: 6 of 12)."""
    runs = [subprocess.Popen([sys.executable, "-m", "oss_responses", "migrate", "--url", empty_database_url],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(3)]
    outputs = [run.communicate(timeout=120)[0] for run in runs]

    assert [run.returncode for run in runs] == [0, 0, 0], outputs
    assert schema_differences(empty_database_url) == []


def test_alembic_command_line_migrates_database(empty_database_url: str) -> None:
    alembic = Path(sys.executable).parent / "alembic"
    subprocess.run([str(alembic), "-x", f"url={empty_database_url}", "upgrade", "head"], cwd=REPO, check=True,
                   capture_output=True)

    assert "responses" in table_names(empty_database_url)


def test_upgrade_indexes_output_items_of_responses_that_ended_before(empty_database_url: str) -> None:
    command.upgrade(alembic_config(empty_database_url), "0006")
    database = Database(empty_database_url)
    try:
        # More than one of the migration's batches (500), so it writes while its read is still open.
        ended = [_ended(new_response(status="completed")) for _ in range(1_100)]
        running = new_response(response={"status": "in_progress", "output": [{"id": "msg_running"}]})
        database.run(_insert_all, [*ended, running])
        migrate(empty_database_url)
        found = database.run(find_stored_items, [f"msg_{record.id}" for record in ended] + ["msg_running"], None)
        assert sorted(found) == sorted(f"msg_{record.id}" for record in ended)
    finally:
        database.dispose()


def test_upgrade_records_conversation_of_responses_still_running(empty_database_url: str) -> None:
    command.upgrade(alembic_config(empty_database_url), "0009")
    database = Database(empty_database_url)
    try:
        in_conversation = {"model": "gpt-oss-20b", "input": "hi", "conversation": "conv_a"}
        running = new_response(status="in_progress", request=in_conversation)
        queued = new_response(request=in_conversation | {"conversation": {"id": "conv_b"}})
        ended = new_response(status="completed", request=in_conversation)
        alone = new_response()
        database.run(_insert_all, [running, queued, ended, alone])
        migrate(empty_database_url)
        found = {record.id: database.run(get_response, record.id).conversation_id  # type: ignore[union-attr]
                 for record in (running, queued, ended, alone)}
        assert found == {running.id: "conv_a", queued.id: "conv_b", ended.id: None, alone.id: None}
    finally:
        database.dispose()


def _ended(record: ResponseRecord) -> ResponseRecord:
    item = {"id": f"msg_{record.id}", "type": "message", "role": "assistant", "content": []}
    return dataclasses.replace(record, response={"id": record.id, "status": "completed", "output": [item]})


def _insert_all(session: Session, records: list[ResponseRecord]) -> None:
    """Rows as the schema of the revision at hand has them (later columns left out)."""
    responses = Table("responses", MetaData(), autoload_with=session.connection())
    rows = [{**dataclasses.asdict(record), "updated_at": record.created_at} for record in records]
    session.execute(insert(responses), [{column.name: row[column.name] for column in responses.c} for row in rows])


def test_schema_behind_for_never_migrated_or_older_revision_not_for_head_or_newer() -> None:
    """A revision this build does not know is a newer release's: the previous release still runs on it
    during a rolling upgrade."""
    head = head_revision()
    assert head is not None
    older = f"{int(head) - 1:04d}"
    assert schema_behind(None) and schema_behind(older)
    assert not schema_behind(head) and not schema_behind(f"{int(head) + 1:04d}")


def test_import_api_and_worker_leaves_alembic_unloaded() -> None:
    # Both import oss_responses.storage and neither migrates; alembic (with mako and tomllib) cost each
    # of their starts ~0.2 s.
    script = ("import sys, oss_responses.api.app, oss_responses.workers.command, oss_responses.workers.tasks\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.postgres
def test_migration_lock_ends_with_its_transaction_for_transaction_poolers(postgres_url: str) -> None:
    """Behind a PgBouncer pooling transactions the server connection is another client's once a transaction
    ends, and the next statement may run elsewhere: a session lock's unlock missed, and the lock left on
    the pooled connection made every later ``migrate`` wait forever. The lock must end with the
    migration's own transaction, the connection still open (as the pooler keeps it)."""
    database, watcher = Database(postgres_url), Database(postgres_url)

    def held() -> int:
        with watcher.engine.connect() as other:
            granted = text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted")
            return other.execute(granted).scalar_one()

    try:
        with database.engine.connect() as connection:
            with connection.begin(), one_migration_at_a_time(connection):
                assert held() == 1
            assert held() == 0
    finally:
        database.dispose()
        watcher.dispose()
