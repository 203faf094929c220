from __future__ import annotations

from collections.abc import Iterator

import pytest

from oss_responses.storage import Database


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    yield database
    database.dispose()
