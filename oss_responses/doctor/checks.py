"""Every check ``oss-responses doctor`` runs, in the order it prints them."""

from __future__ import annotations

from oss_responses.doctor.clocks import check_clocks
from oss_responses.doctor.report import Check
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
