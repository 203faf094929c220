"""What a worker reads from SQL to run one response: its row, the chain of earlier turns, the request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oss_responses.config import Settings
from oss_responses.conversation import check_chain, render_options, turn_of
from oss_responses.harmony.render import ConversationTurn, McpToolSpec, RenderOptions
from oss_responses.requests import CreateResponseRequest, parse_create_request
from oss_responses.storage import Database, ResponseRecord, get_chain


@dataclass(slots=True)
class Job:
    record: ResponseRecord
    history: list[ConversationTurn]
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def response_id(self) -> str:
        return self.record.id

    def request(self) -> CreateResponseRequest:
        """The stored request, with the MCP credentials (never stored) put back into its tools."""
        body = dict(self.record.request)
        body["tools"] = [with_secrets(tool, self.secrets) for tool in body.get("tools", [])]
        return parse_create_request(body)


def with_secrets(tool: dict[str, Any], secrets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if tool.get("type") != "mcp":
        return tool
    return tool | secrets.get(tool.get("server_label", ""), {})


def load_job(db: Database, response_id: str, secrets: dict[str, dict[str, Any]] | None = None) -> Job | None:
    """The response and its earlier turns (None if the row is gone: deleted, or never committed).

    Raises BrokenChain when an earlier turn was deleted after this response was accepted.
    """
    chain = db.run(get_chain, response_id)
    if not chain or chain[-1].id != response_id:
        return None
    check_chain(chain)
    history = [turn_of(record) for record in chain[:-1]]
    return Job(record=chain[-1], history=history, secrets=dict(secrets or {}))


def job_render_options(settings: Settings, record: ResponseRecord, mcp_tools: dict[str, list[McpToolSpec]]) -> RenderOptions:
    return render_options(settings, record.created_at, mcp_tools)
