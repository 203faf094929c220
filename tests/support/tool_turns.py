"""One test's world for tool turns: settings with the MCP servers configured by label, the database,
Redis, and running a response in a local worker as the Celery task would (secrets passed along)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis as redis_lib

from oss_responses.config import Settings
from oss_responses.sealing import new_key
from oss_responses.storage import Database, get_response
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.testing import local_worker, run_response_now
from support.servers import free_port
from support.streams import check_stream, events_of
from support.workers import accept_with_secrets, worker_settings

CALC = {"type": "mcp", "server_label": "calc", "require_approval": "never"}
BAD = {"type": "mcp", "server_label": "bad", "require_approval": "never"}


def tool_settings(
    database_url: str, redis_url: str, calculator_url: str, misbehaving_url: str, **overrides: Any
) -> Settings:
    servers = {
        "code_interpreter": calculator_url,
        "calc": calculator_url,
        "bad": misbehaving_url,
        "gone": f"http://127.0.0.1:{free_port()}/mcp",  # nothing listens there
    }
    # With a sealing key: the credentials of the secrets tests travel sealed in the row, as from the API.
    return worker_settings(database_url, redis_url, tool_servers=servers, encryption_keys=[new_key()], **overrides)


@dataclass
class ToolEnv:
    settings: Settings
    db: Database
    redis: redis_lib.Redis

    def accept(self, **body: Any) -> tuple[str, dict[str, Any]]:
        return accept_with_secrets(self.db, self.redis, self.settings, **body)

    def run(self, worker: WorkerContext | None = None, **body: Any) -> dict[str, Any]:
        """Accept a request, run it to its end, check its stream; the stored Response."""
        response_id, secrets = self.accept(**body)
        if worker is None:
            with local_worker(self.settings) as own:
                run_response_now(response_id, worker=own, secrets=secrets)
        else:
            run_response_now(response_id, worker=worker, secrets=secrets)
        return self.stored(response_id)

    def stored(self, response_id: str) -> dict[str, Any]:
        record = self.db.run(get_response, response_id)
        assert record is not None
        check_stream(events_of(self.redis, response_id), record.response)
        return record.response

    def event_types(self, response_id: str) -> list[str]:
        return [event["type"] for event in events_of(self.redis, response_id)]


def types_of(response: dict[str, Any]) -> list[str]:
    return [item["type"] for item in response["output"]]


def item(response: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [i for i in response["output"] if i["type"] == kind]
    return found


def final_text(response: dict[str, Any]) -> str:
    return response["output"][-1]["content"][0]["text"]


def error_text(call: dict[str, Any]) -> str:
    """A failed mcp_call's structured error, as text."""
    assert call["status"] == "failed" and call["error"]["type"] == "mcp_tool_execution_error"
    return "".join(part["text"] for part in call["error"]["content"])
