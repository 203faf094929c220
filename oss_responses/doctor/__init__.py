"""``oss-responses doctor``: checks what the service needs at run time and says what is wrong.

Each check is a small function of the settings yielding :class:`CheckResult` lines (ok / warn /
FAIL with what to do). Checks only read: they never migrate, unpack or write, so the doctor is safe
to run against production.
"""

from __future__ import annotations

from oss_responses.doctor.clocks import check_clocks
from oss_responses.doctor.report import Check, CheckResult, run_checks
from oss_responses.doctor.runtime import check_encryption_keys, check_engine, check_vocabulary
from oss_responses.doctor.stores import check_database, check_database_connections, check_redis
from oss_responses.doctor.tools import check_tool_servers
from oss_responses.doctor.workers import check_workers

CHECKS: tuple[Check, ...] = (
    check_redis,
    check_database,
    check_database_connections,
    check_vocabulary,
    check_engine,
    check_tool_servers,
    check_encryption_keys,
    check_workers,
    check_clocks,
)

__all__ = ["CHECKS", "CheckResult", "run_checks"]
