"""Tool turns against a real MCP server (the demo calculator): the call's result goes back to the
model, which continues the same response."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import redis as redis_lib
from support.servers import free_port
from worker_support import REPO, accept, assert_contiguous, events_of, worker_settings

from oss_responses.storage import Database, get_response
from oss_responses.workers.testing import local_worker, run_response_now


@pytest.fixture(scope="module")
def calculator_url() -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "oss_responses.tools.servers.calculator", "--port", str(port)]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(timeout=10)


def run_with_tools(database_url: str, redis_url: str, redis: redis_lib.Redis, url: str, **body) -> dict:  # type: ignore[no-untyped-def, type-arg]
    settings = worker_settings(
        database_url, redis_url, tool_servers={"code_interpreter": url, "calc": url}, mcp_allow_private_urls=True
    )
    db = Database(settings.database_url)
    response_id = accept(db, redis, settings, **body)
    with local_worker(settings) as worker:
        assert run_response_now(response_id, worker=worker) == "completed"
    assert_contiguous(events_of(redis, response_id))
    record = db.run(get_response, response_id)
    db.dispose()
    return record.response  # type: ignore[union-attr]


def test_mcp_call_result_is_quoted_in_final_answer(
    database_url: str, redis_url: str, redis: redis_lib.Redis, calculator_url: str
) -> None:
    tool = {"type": "mcp", "server_label": "calc", "require_approval": "never"}
    response = run_with_tools(
        database_url, redis_url, redis, calculator_url, input='call calc.calculate {"expression": "6*7"}', tools=[tool]
    )
    types = [item["type"] for item in response["output"]]
    assert types == ["reasoning", "mcp_call", "reasoning", "message"]
    assert response["output"][1]["output"] == "42"
    assert response["output"][-1]["content"][0]["text"] == "The tool calc.calculate returned: 42"


def test_python_builtin_call_runs_on_code_interpreter_server(
    database_url: str, redis_url: str, redis: redis_lib.Redis, calculator_url: str
) -> None:
    tool = {"type": "code_interpreter", "container": {"type": "auto"}}
    response = run_with_tools(database_url, redis_url, redis, calculator_url, input="call python 123*456", tools=[tool])
    assert "56088" in response["output"][-1]["content"][0]["text"]
