"""Checks of the stores: Redis (reachable, persistent) and the database (reachable, migrated, and on
PostgreSQL with connections enough for the pools)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import redis as redis_lib
from redis.exceptions import NoPermissionError
from sqlalchemy import URL, make_url, text
from sqlalchemy.exc import SQLAlchemyError

from oss_responses.config import Settings
from oss_responses.doctor.report import CheckResult
from oss_responses.logs import safe_url
from oss_responses.storage import Database
from oss_responses.storage.db import most_connections
from oss_responses.storage.migrations import current_revision, head_revision, schema_newer

TIMEOUT_SECONDS = 3


def check_redis(settings: Settings) -> Iterator[CheckResult]:
    from oss_responses.broker import BrokerNotRedis, redis_broker_url  # here: `keys` and `webhooks` import this module

    yield _redis_result("redis", settings.redis_url)
    try:  # the broker the service's Celery apps use: Celery's environment variables before the setting
        broker = redis_broker_url(settings.celery_broker_url)
    except BrokerNotRedis as exc:
        yield CheckResult("broker", "FAIL", str(exc))
        return
    if broker != settings.redis_url:
        yield _redis_result("broker", broker)


def _redis_result(name: str, url: str) -> CheckResult:
    client = redis_lib.Redis.from_url(url, socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS)
    try:
        client.ping()
        aof = client.info("persistence").get("aof_enabled")
        policy = str(client.info("memory").get("maxmemory_policy", "noeviction"))
        # Leases, the event writer's fence and kombu's consumer run Lua scripts: a user without them (an ACL
        # without @scripting, as managed services hand out) stopped every worker at its start.
        client.eval("return 1", 0)
    except NoPermissionError as exc:
        return CheckResult(name, "FAIL", f"{safe_url(url)} answers, but refuses this user a command the service "
                                         f"needs ({exc}): grant it INFO and Lua scripts (EVAL, EVALSHA, SCRIPT)")
    except redis_lib.RedisError as exc:
        return CheckResult(name, "FAIL", f"{safe_url(url)} does not answer ({type(exc).__name__}): start Redis "
                                         f"or fix OSS_RESPONSES_{name.upper()}_URL")
    finally:
        client.close()
    problems = []
    if not aof:
        problems.append("AOF is off: a Redis restart loses queued tasks, event streams and leases; run "
                        "redis-server --appendonly yes")
    if policy != "noeviction":
        # Read from INFO, not CONFIG GET: managed Redis services often refuse CONFIG.
        problems.append(f"maxmemory-policy is {policy}: once Redis is full it deletes keys (leases, then a "
                        "response runs twice; queued tasks; event streams); set maxmemory-policy noeviction")
    if problems:
        return CheckResult(name, "warn", f"{safe_url(url)} answers, but " + "; and ".join(problems))
    return CheckResult(name, "ok", f"{safe_url(url)} answers; AOF on; maxmemory-policy noeviction")


def check_database(settings: Settings) -> Iterator[CheckResult]:
    yield database_result(settings.database_url)


def database_problem(database_url: str) -> str | None:
    """Why a command cannot use this database (no such file, unreachable, not migrated), or None. Asked
    before the command touches it: a query would create an empty SQLite file, or fail in a traceback."""
    result = database_result(database_url)
    return result.detail if result.status == "FAIL" else None


def database_result(database_url: str) -> CheckResult:
    url = make_url(database_url)
    shown = url.render_as_string(hide_password=True)
    if _missing_sqlite_file(url):
        return CheckResult("database", "FAIL", f"{shown}: no such file; run `oss-responses migrate`")
    try:
        current = current_revision(_with_connect_timeout(url))
    except (SQLAlchemyError, OSError) as exc:
        return CheckResult("database", "FAIL", f"{shown}: cannot connect ({_reason(exc)}); "
                                               "start the database or fix OSS_RESPONSES_DATABASE_URL")
    return _revision_result(shown, current, head_revision())


def _reason(exc: Exception) -> str:
    """The driver's own first line (libpq's "server does not support SSL, but SSL was required", "password
    authentication failed"): the exception's type alone left the operator to run migrate to learn it."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


def check_database_connections(settings: Settings) -> Iterator[CheckResult]:
    """PostgreSQL: are there connections enough for what this configuration's processes keep open?

    Only one API deployment and one worker process are counted (the doctor cannot see the others)."""
    url = make_url(settings.database_url)
    if url.get_backend_name() != "postgresql":
        return
    each = most_connections(settings.database_pool_size)
    api, worker = settings.api_processes * each, each
    try:
        available = _available_connections(_with_connect_timeout(url))
    except (SQLAlchemyError, OSError):
        return  # check_database says it cannot connect
    counts = f"the API ({settings.api_processes} process(es)) opens up to {api}, each worker process up to {worker}"
    if available < api + worker:
        yield CheckResult("database connections", "warn", f"PostgreSQL takes {available} connections; {counts}: "
                                                           "raise its max_connections (README: PostgreSQL)")
        return
    yield CheckResult("database connections", "ok", f"PostgreSQL takes {available} connections; {counts}")


def _available_connections(url: URL) -> int:
    """max_connections less those reserved for superusers."""
    database = Database(url)
    try:
        with database.engine.connect() as connection:
            total = int(connection.execute(text("SHOW max_connections")).scalar_one())
            reserved = int(connection.execute(text("SHOW superuser_reserved_connections")).scalar_one())
    finally:
        database.dispose()
    return total - reserved


def _revision_result(shown: str, current: str | None, head: str | None) -> CheckResult:
    if current == head:
        return CheckResult("database", "ok", f"{shown} at revision {current} (head)")
    if current is None:
        return CheckResult("database", "FAIL", f"{shown} is not migrated (head is {head}); run `oss-responses migrate`")
    if schema_newer(current):
        return CheckResult("database", "warn", f"{shown} at revision {current}, newer than this release's {head}: "
                                               "a newer release migrated it (a rollback runs on it as it is)")
    return CheckResult("database", "FAIL", f"{shown} at revision {current}, head is {head}; run `oss-responses "
                                           "migrate`")


def _missing_sqlite_file(url: URL) -> bool:
    """Connecting would create an empty SQLite file: say it is missing instead."""
    database = url.database
    return url.get_backend_name() == "sqlite" and database not in (None, "", ":memory:") and not Path(database).exists()


def _with_connect_timeout(url: URL) -> URL:
    if url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
        return url.update_query_dict({"connect_timeout": str(TIMEOUT_SECONDS)})
    return url
