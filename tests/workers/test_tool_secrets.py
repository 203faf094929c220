"""MCP credentials (``authorization``, ``headers``) come to the worker with the task, not from SQL:
they reach the server, and are written to no row, event (in Redis or archived in SQL), Redis key or log
line."""

from __future__ import annotations

import logging
import uuid

import pytest
import redis as redis_lib
from sqlalchemy import text
from support.tool_turns import BAD, ToolEnv, item

from oss_responses.storage import get_event_log
from oss_responses.workers.testing import local_worker, run_response_now


def all_rows(tools: ToolEnv) -> str:
    with tools.db.engine.connect() as connection:
        tables = ("responses", "input_items")  # our own names: nothing to inject
        return repr([connection.execute(text(f"SELECT * FROM {table}")).all() for table in tables])  # noqa: S608


def all_redis(client: redis_lib.Redis) -> str:
    values: list[object] = []
    for key in client.scan_iter():
        kind = client.type(key).decode()
        values.append(key)
        if kind == "stream":
            values.append(client.xrange(key))
        elif kind == "string":
            values.append(client.get(key))
    return repr(values)


def all_archived(tools: ToolEnv) -> str:
    """The event logs moved to SQL, decompressed (a compressed secret would not show as text)."""
    with tools.db.session() as session:
        ids = session.execute(text("SELECT response_id FROM event_logs")).scalars().all()
        logs = [get_event_log(session, response_id) for response_id in ids]
        return repr([event_log.frames for event_log in logs if event_log is not None])


def test_authorization_reaches_the_server(tools: ToolEnv) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    response = tools.run(input="call bad.authorization {}", tools=[BAD | {"authorization": token}])
    assert item(response, "mcp_call")["output"] == f"Bearer {token}"


def test_secrets_are_never_stored_nor_logged(tools: ToolEnv, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    token, key = f"tok-{uuid.uuid4().hex}", f"key-{uuid.uuid4().hex}"
    bad = BAD | {"authorization": token, "headers": {"X-Api-Key": key}}
    with_secrets = tools.run(input='call bad.sleep {"seconds": 0}', tools=[bad])
    assert item(with_secrets, "mcp_call")["output"] == "awake"
    tools.run(input="call bad.crash {}", tools=[bad], previous_response_id=with_secrets["id"])
    rows, streams = all_rows(tools), all_redis(tools.redis) + all_archived(tools)
    assert "awake" in rows and "awake" in streams  # the dumps do hold the responses
    for dump in (rows, streams, caplog.text):
        assert token not in dump and key not in dump


def test_sealed_credentials_reach_the_server_from_a_task_without_them(tools: ToolEnv) -> None:
    # A takeover (or a handoff) sends the task with the response id only: the row's sealed credentials serve.
    token = f"tok-{uuid.uuid4().hex}"
    response_id, carried = tools.accept(input="call bad.authorization {}", tools=[BAD | {"authorization": token}])
    assert carried == {}
    with local_worker(tools.settings) as worker:
        assert run_response_now(response_id, worker=worker) == "completed"
    assert item(tools.stored(response_id), "mcp_call")["output"] == f"Bearer {token}"
