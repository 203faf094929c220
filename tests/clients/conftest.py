"""The service as real clients see it: an API process and a Celery worker process (scripted engine,
SQLite), with the demo calculator MCP server configured under the label ``calc``; one stack per test
module. The clients themselves (Codex CLI, the Agents SDK) are in the tests.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# The helpers sit beside these tests (and the API tests' process starters in tests/api); importlib
# import mode does not put these folders on sys.path.
sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "api")]

from api_server import MODEL, start_api_process, start_worker_process, stop_process  # noqa: E402
from tool_fixtures import mcp_server, tool_env  # noqa: E402

from oss_responses.config import Settings  # noqa: E402

TOKENS_PER_SECOND = 2000.0  # Codex's answers quote its long environment context; keep them quick
CALCULATOR_LABEL = "calc"


@dataclass
class Service:
    base_url: str  # what a client's base_url is: http://127.0.0.1:PORT/v1
    calculator_url: str  # the calculator's own Streamable HTTP endpoint (for clients with an MCP client)
    logs: Path

    def log_tail(self, chars: int = 3000) -> str:
        """The processes' logs, last part of each, for assertion messages."""
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}"
                         for path in sorted(self.logs.glob("*.log")))


@pytest.fixture(scope="module")
def service(redis_url: str, sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("clients")
    shutil.copyfile(sqlite_template, folder / "oss-responses.db")
    with mcp_server("-m", "oss_responses.tools.servers.calculator") as calculator:
        settings = Settings(database_url=f"sqlite:///{folder / 'oss-responses.db'}", redis_url=redis_url,
                            models=[MODEL], scripted_tokens_per_second=TOKENS_PER_SECOND,
                            tool_servers={CALCULATOR_LABEL: calculator})
        processes: list[subprocess.Popen[bytes]] = []
        try:
            processes.append(start_worker_process(settings, folder / "worker.log", env=tool_env(settings)))
            api, base_url = start_api_process(settings, folder / "api.log", env=tool_env(settings))
            processes.append(api)
            yield Service(base_url=f"{base_url}/v1", calculator_url=calculator, logs=folder)
        finally:
            for process in reversed(processes):
                stop_process(process)
