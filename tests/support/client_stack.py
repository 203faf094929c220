"""The service as real clients see it: an API process and a Celery worker process (scripted engine,
SQLite), with the demo calculator MCP server configured under the label ``calc`` and the demo
documents server as the browser behind ``web_search`` (Codex offers that tool in every request, and the
service refuses a web_search it has no backend for)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oss_responses.config import Settings
from oss_responses.sealing import new_key
from support import MODEL
from support.mcp import CALCULATOR, DOCUMENTS, mcp_server
from support.processes import (
    ServiceProcess,
    start_api_process,
    start_worker_process,
    stop_process,
)

TOKENS_PER_SECOND = 2000.0  # Codex's answers quote its long environment context; keep them quick
CALCULATOR_LABEL = "calc"


def call_directive(recipient: str, **arguments: object) -> str:
    """A prompt the scripted engine answers with a call of ``recipient`` with these JSON arguments."""
    return f"call {recipient} {json.dumps(arguments)}"


@dataclass
class Service:
    base_url: str  # what a client's base_url is: http://127.0.0.1:PORT/v1
    calculator_url: str  # the calculator's own Streamable HTTP endpoint (for clients with an MCP client)
    logs: Path

    def log_tail(self, chars: int = 3000) -> str:
        """The processes' logs, last part of each, for assertion messages."""
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}"
                         for path in sorted(self.logs.glob("*.log")))


@contextmanager
def running_service(redis_url: str, sqlite_template: Path, folder: Path, **settings_given: Any) -> Iterator[Service]:
    """The calculator, a worker and an API process on a copy of the migrated SQLite template (``settings_given``:
    settings of both beyond these)."""
    shutil.copyfile(sqlite_template, folder / "oss-responses.db")
    with mcp_server(*CALCULATOR) as calculator, \
            mcp_server(*DOCUMENTS) as documents:
        settings = Settings(database_url=f"sqlite:///{folder / 'oss-responses.db'}", redis_url=redis_url,
                            models=[MODEL], scripted_tokens_per_second=TOKENS_PER_SECOND,
                            tool_servers={CALCULATOR_LABEL: calculator, "code_interpreter": calculator,
                                          "web_search": documents},
                            # Codex asks for reasoning.encrypted_content on every request (store=false).
                            encryption_keys=[new_key()], **settings_given)
        processes: list[ServiceProcess] = []
        try:
            processes.append(start_worker_process(settings, folder / "worker.log"))
            api, base_url = start_api_process(settings, folder / "api.log")
            processes.append(api)
            yield Service(base_url=f"{base_url}/v1", calculator_url=calculator, logs=folder)
        finally:
            for process in reversed(processes):
                stop_process(process)
