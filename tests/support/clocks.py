"""A test of a worker host whose clock differs from the database's: only PostgreSQL's server has a clock of
its own (a SQLite file is shared by the processes of one host, whose clock it is), so such tests run there."""

from __future__ import annotations

import pytest

ON_POSTGRESQL_ONLY = pytest.mark.parametrize(
    "database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
