"""What a worker reads from SQL to run one response: its row, the chain of earlier turns, the request.

A row that was read but cannot be loaded (its stored Response or an earlier turn does not validate)
still makes a :class:`Job`, carrying the error and a placeholder Response: the runner then fails the
response at once (failed event, stream closed, SQL terminal) instead of dying with the client waiting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from openai.types.responses import Response

from oss_responses.config import Settings
from oss_responses.conversation import (
    BrokenChain,
    ConversationPrefix,
    check_chain,
    prefix_position,
    render_options,
    turn_of,
    with_prefix,
)
from oss_responses.harmony.lifecycle import placeholder_response, validate_response
from oss_responses.harmony.render import ConversationTurn, McpToolSpec, RenderOptions
from oss_responses.requests import CreateResponseRequest, parse_create_request
from oss_responses.sealing import Sealer, open_secrets
from oss_responses.storage import Database, ResponseRecord, get_chain
from oss_responses.storage.conversations import items_through
from oss_responses.workers.outage import unreachable


class JobLoadError(RuntimeError):
    """The response's row was read, but it (or an earlier turn of its chain) cannot be loaded.

    ``code``: the failed response's error code: ``invalid_prompt`` when a client deleted what it continues
    (an earlier turn, its conversation), ``server_error`` for a row that does not load."""

    def __init__(self, message: str, code: str = "server_error") -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class Job:
    record: ResponseRecord
    history: list[ConversationTurn]
    response: Response  # the stored Response as loaded (a placeholder when load_error is set)
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)
    load_error: JobLoadError | None = None

    @property
    def response_id(self) -> str:
        return self.record.id

    def request(self) -> CreateResponseRequest:
        """The stored request, with the MCP credentials (never stored) put back into its tools."""
        if self.load_error is not None:
            raise self.load_error
        body = dict(self.record.request)
        body["tools"] = [with_secrets(tool, self.secrets) for tool in body.get("tools", [])]
        try:
            return parse_create_request(body)
        except Exception as exc:
            raise JobLoadError(f"The stored request of {self.response_id} cannot be loaded: {exc}") from exc


def with_secrets(tool: dict[str, Any], secrets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if tool.get("type") != "mcp":
        return tool
    return tool | secrets.get(tool.get("server_label", ""), {})


def load_job(
    db: Database,
    response_id: str,
    settings: Settings,
    secrets: dict[str, dict[str, Any]] | None = None,
    sealer: Sealer | None = None,
) -> Job | None:
    """The response and its earlier turns (None if the row is gone: deleted, or never committed); the
    first of them the items of the conversation the chain began in, if it began in one.

    Its MCP credentials are the sealed ones of its row (``secrets``: those a task of an older version
    carried). A row that cannot be loaded, a chain broken by a deleted earlier turn (BrokenChain)
    included, or credentials that do not open, is a Job with ``load_error`` set: the runner fails it. A
    database that does not answer is not such a row: its error is raised (the task tries again).
    """
    chain = db.run(get_chain, response_id)
    if not chain or chain[-1].id != response_id:
        return None
    record = chain[-1]
    try:
        secrets = _opened_secrets(record, sealer) | dict(secrets or {})
        check_chain(chain)
        if not isinstance(record.request, dict):
            raise TypeError(f"the stored request is a {type(record.request).__name__}, not an object")
        history = _with_conversation(db, chain, [turn_of(earlier) for earlier in chain[:-1]], settings, sealer)
        response = Response.model_validate(record.response)
    except Exception as exc:
        if unreachable(exc):  # the database did not answer (its conversation's items): the task tries again
            raise
        if isinstance(exc, BrokenChain):  # deleted by its client since it was accepted
            error = JobLoadError(f"Response {response_id} cannot go on: {exc}.", code="invalid_prompt")
        else:
            error = JobLoadError(f"The stored response {response_id} cannot be loaded: {type(exc).__name__}: {exc}")
        return Job(record, [], placeholder_of(record), dict(secrets or {}), load_error=error)
    return Job(record, history, response, dict(secrets or {}))


def _with_conversation(
    db: Database,
    chain: list[ResponseRecord],
    history: list[ConversationTurn],
    settings: Settings,
    sealer: Sealer | None,
) -> list[ConversationTurn]:
    position = prefix_position(chain)
    if position is None:
        return history
    conversation_id, through = position
    found = db.run(items_through, conversation_id, through)
    if found is None:
        raise BrokenChain(f"conversation '{conversation_id}', which this response continues, was deleted")
    options = render_options(settings, chain[-1].created_at, sealer=sealer, owner=chain[-1].owner)
    return with_prefix(history, ConversationPrefix(conversation_id, through, found[0]), options)


def _opened_secrets(record: ResponseRecord, sealer: Sealer | None) -> dict[str, dict[str, Any]]:
    if record.sealed_secrets is None:
        return {}
    opened = open_secrets(sealer, record.sealed_secrets) if sealer is not None else None
    if opened is None:
        raise ValueError(
            "its MCP credentials do not open with this worker's OSS_RESPONSES_ENCRYPTION_KEYS "
            "(the key that sealed them is not among them)"
        )
    return opened


def stored_response(record: ResponseRecord) -> Response:
    """The stored Response, or a placeholder when the stored JSON does not validate."""
    try:
        return validate_response(record.response)
    except Exception:
        return placeholder_of(record)


def placeholder_of(record: ResponseRecord) -> Response:
    created_at = int(record.created_at.timestamp())
    return placeholder_response(record.id, record.model, created_at, background=record.background)


def job_render_options(
    settings: Settings, record: ResponseRecord, mcp_tools: dict[str, list[McpToolSpec]], sealer: Sealer | None = None
) -> RenderOptions:
    return render_options(settings, record.created_at, mcp_tools, sealer, record.owner)
