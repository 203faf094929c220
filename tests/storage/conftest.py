from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from oss_responses.storage import Database


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    yield database
    database.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no tables at all (migrations start from here)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sub' / 'empty.db'}"
        return
    cluster = request.getfixturevalue("postgres_cluster")
    name = f"empty_{tmp_path.name}".lower().replace("-", "_")[:60]
    yield cluster.create_database(name)
    cluster.drop_database(name)
