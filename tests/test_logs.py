"""Log lines: JSON or text, each carrying the context bound where the work started (logs.py)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from oss_responses.logs import log_context, make_handler
from oss_responses.workers.engine_loop import EngineLoop

log = logging.getLogger("oss_responses.tests")


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = make_handler("json", stream)
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    yield stream
    log.removeHandler(handler)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_format_json_line_with_bound_context(captured: io.StringIO) -> None:
    with log_context(response_id="resp_1", model="gpt-oss-20b", worker_id="w1"):
        log.info("about %s", "it")
    [line] = _lines(captured)
    assert (line["message"], line["level"], line["logger"]) == ("about it", "INFO", "oss_responses.tests")
    assert (line["response_id"], line["model"], line["worker_id"]) == ("resp_1", "gpt-oss-20b", "w1")


def test_format_json_line_without_context_fields_unset(captured: io.StringIO) -> None:
    log.warning("plain")
    [line] = _lines(captured)
    assert "response_id" not in line and "request_id" not in line


def test_format_json_exception_in_one_line(captured: io.StringIO) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    [line] = _lines(captured)
    assert "ValueError: boom" in str(line["exc_info"])


def test_format_text_line_with_context() -> None:
    stream = io.StringIO()
    handler = make_handler("text", stream)
    log.addHandler(handler)
    try:
        with log_context(response_id="resp_2"):
            log.warning("hello")
    finally:
        log.removeHandler(handler)
    assert "[response_id=resp_2]: hello" in stream.getvalue()


def test_context_follows_coroutine_onto_engine_loop_and_its_tasks(captured: io.StringIO) -> None:
    async def on_loop() -> None:
        log.info("on the loop")
        await asyncio.get_running_loop().create_task(_in_task())

    async def _in_task() -> None:
        log.info("in a task")

    loop = EngineLoop().start()
    try:
        with log_context(response_id="resp_3", worker_id="w3"):
            loop.run(on_loop())
        loop.run(_in_task())  # outside any context: nothing leaks from the earlier run
    finally:
        loop.stop()
    lines = _lines(captured)
    assert [line.get("response_id") for line in lines] == ["resp_3", "resp_3", None]


def test_access_line_keeps_no_query_value() -> None:
    """A key sent as ?api_key=... (refused with a 401) was written whole in the access log."""
    stream = io.StringIO()
    access = logging.getLogger("uvicorn.access")
    handler = make_handler("json", stream)
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET", "/v1/models?api_key=sk-secret&limit=2", "1.1", 401)
    finally:
        access.removeHandler(handler)
    [line] = _lines(stream)
    # Exact where nothing else rewrites records (LiteLLM, once imported in the process, also masks the
    # name "api_key"): the secret and the other value are gone, the route stays.
    assert "sk-secret" not in line["message"] and "limit=2" not in line["message"]
    assert line["message"].startswith('127.0.0.1:1 - "GET /v1/models?') and "limit=..." in line["message"]
