"""Real clients (Codex CLI, the Agents SDK) against the service: one stack per test module
(``client_stack.running_service``); the clients themselves are in the tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The helpers sit beside these tests (and the API tests' process starters in tests/api); importlib
# import mode does not put these folders on sys.path.
sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "api")]

from client_stack import Service, running_service  # noqa: E402


@pytest.fixture(scope="module")
def service(redis_url: str, sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(redis_url, sqlite_template, tmp_path_factory.mktemp("clients")) as running:
        yield running
