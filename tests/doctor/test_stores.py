"""The doctor's Redis and database checks, against a real redis-server, SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib
from alembic import command
from sqlalchemy import text
from support.servers import free_port, start_redis

from oss_responses.config import Settings
from oss_responses.doctor import CheckResult
from oss_responses.doctor.stores import check_database, check_database_connections, check_redis
from oss_responses.storage import Database
from oss_responses.storage.migrations import alembic_config, head_revision


def only(results: Iterator[CheckResult]) -> CheckResult:
    [result] = list(results)
    return result


def test_check_redis_warns_when_aof_is_off(settings: Settings) -> None:
    result = only(check_redis(settings))

    assert result.status == "warn"
    assert "AOF is off" in result.detail and "--appendonly yes" in result.detail


def test_check_redis_passes_with_aof() -> None:
    server = start_redis(appendonly=True)
    try:
        result = only(check_redis(Settings(redis_url=server.url)))
    finally:
        server.stop()

    assert (result.status, result.detail) == ("ok", f"{server.url} answers; AOF on; maxmemory-policy noeviction")


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru"])
def test_check_redis_warns_when_redis_may_evict_keys(policy: str) -> None:
    server = start_redis(appendonly=True)
    try:
        redis_lib.Redis.from_url(server.url).config_set("maxmemory-policy", policy)
        result = only(check_redis(Settings(redis_url=server.url)))
    finally:
        server.stop()

    assert result.status == "warn"
    assert f"maxmemory-policy is {policy}" in result.detail and "set maxmemory-policy noeviction" in result.detail


def test_check_redis_fails_when_its_user_may_not_run_scripts() -> None:
    # A managed Redis's ACL without @scripting: the doctor said ok, and every worker stopped at its start
    # ("Unrecoverable error: NoPermissionError ... 'evalsha'").
    server = start_redis(appendonly=True)
    try:
        redis_lib.Redis.from_url(server.url).acl_setuser(
            "app", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"], commands=["+@all", "-@scripting"])
        url = server.url.replace("redis://", "redis://app:pw@")
        result = only(check_redis(Settings(redis_url=url)))
    finally:
        server.stop()

    assert result.status == "FAIL"
    assert "'eval'" in result.detail and "Lua scripts" in result.detail and "pw@" not in result.detail


def test_check_redis_fails_when_nothing_listens() -> None:
    result = only(check_redis(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")))

    assert result.status == "FAIL"
    assert "does not answer" in result.detail


def test_check_redis_hides_the_password() -> None:
    url = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0"

    result = only(check_redis(Settings(redis_url=url)))

    assert "hunter2-secret" not in result.line


def test_check_redis_fails_when_celery_broker_url_is_no_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    # Celery's own variable wins over the setting; an AMQP broker there was "the check itself failed (ValueError)".
    monkeypatch.setenv("CELERY_BROKER_URL", "amqp://guest:amqp-pw-51c@127.0.0.1:5672//")

    results = list(check_redis(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")))

    assert [(result.name, result.status) for result in results] == [("redis", "FAIL"), ("broker", "FAIL")]
    assert "is not a Redis" in results[1].detail and "amqp-pw-51c" not in results[1].line


def test_check_database_passes_at_head(settings: Settings) -> None:
    result = only(check_database(settings))

    assert result.status == "ok"
    assert result.detail.endswith(f"at revision {head_revision()} (head)")


def test_check_database_fails_before_head(settings: Settings) -> None:
    command.downgrade(alembic_config(settings.database_url), "-1")

    result = only(check_database(settings))

    assert result.status == "FAIL"
    assert f"head is {head_revision()}" in result.detail and "oss-responses migrate" in result.detail


def test_check_database_warns_at_revision_of_newer_release(settings: Settings) -> None:
    newer = f"{int(head_revision() or 0) + 1:04d}"
    with Database(settings.database_url).session() as session:
        session.execute(text("UPDATE alembic_version SET version_num = :newer"), {"newer": newer})

    result = only(check_database(settings))

    assert result.status == "warn" and "newer than this release's" in result.detail


def test_check_database_fails_when_not_migrated(settings: Settings) -> None:
    command.downgrade(alembic_config(settings.database_url), "base")  # connectable, no revision

    result = only(check_database(settings))

    assert result.status == "FAIL"
    assert "is not migrated" in result.detail


def test_check_database_fails_on_missing_sqlite_file_without_creating_it(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "db.sqlite"

    result = only(check_database(Settings(database_url=f"sqlite:///{path}")))

    assert result.status == "FAIL" and "no such file" in result.detail
    assert not path.parent.exists()


@pytest.mark.postgres
def test_check_database_fails_when_postgres_is_unreachable() -> None:
    url = f"postgresql+psycopg://oss:pw-secret@127.0.0.1:{free_port()}/nothing"

    result = only(check_database(Settings(database_url=url)))

    assert result.status == "FAIL"
    assert "cannot connect" in result.detail and "pw-secret" not in result.line
    assert "Connection refused" in result.detail  # the driver's reason, not only its exception's type


@pytest.mark.postgres
def test_check_database_connections_passes_when_postgres_takes_the_pools(postgres_url: str) -> None:
    # The test cluster takes 200 connections (less 3 reserved): an API process's 16 + 10, a worker's alike.
    result = only(check_database_connections(Settings(database_url=postgres_url)))

    assert (result.status, result.detail) == (
        "ok", "PostgreSQL takes 197 connections; the API (1 process(es)) opens up to 26, each worker process up to 26"
    )


@pytest.mark.postgres
def test_check_database_connections_warns_when_the_pools_exceed_postgres(postgres_url: str) -> None:
    result = only(check_database_connections(Settings(database_url=postgres_url, api_processes=8)))

    assert result.status == "warn"  # 8 x 26 for the API, 26 for a worker
    assert "opens up to 208" in result.detail and "raise its max_connections" in result.detail


def test_check_database_connections_has_nothing_to_say_on_sqlite(tmp_path: Path) -> None:
    assert list(check_database_connections(Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}"))) == []
