"""Added latency of one tool turn inside the worker: the model's ``<|call|>`` → the tool's result back
in the engine (the next generation's prompt), with the MCP session reused across responses.

Runs responses "call python 123*456" (tool code_interpreter, served by the calculator MCP server on
loopback) one after another in an in-process worker (scripted engine, its own redis-server, SQLite).
An engine wrapper timestamps the output that carries ``<|call|>`` and the start of the generation
that continues after the tool message; the gap is the translator, the event writer, the MCP call,
the tool message and the continuation prompt.

    PYTHONPATH=.:tests python bench/tool_turn_worker.py [--responses 200]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import AsyncIterator, Sequence

import redis as redis_lib
from _common import percentile
from support.engines import WrappedEngine
from support.mcp import CALCULATOR, mcp_server
from support.servers import start_redis
from support.workers import accept, worker_settings

from oss_responses.engine.base import EngineOutput, SamplingSettings
from oss_responses.engine.scripted import ScriptedEngine
from oss_responses.storage import Database, get_response
from oss_responses.storage.migrations import migrate
from oss_responses.vocab import load_encoding
from oss_responses.workers.testing import local_worker, run_response_now

CALL = 200012  # <|call|>


class TimingEngine(WrappedEngine):
    """The scripted engine; records the gap between a ``<|call|>`` output and the next generate()."""

    def __init__(self, inner: ScriptedEngine) -> None:
        super().__init__(inner)
        self.call_at: float | None = None
        self.gaps_ms: list[float] = []

    async def generate(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingSettings
    ) -> AsyncIterator[EngineOutput]:
        if self.call_at is not None:
            self.gaps_ms.append((time.perf_counter() - self.call_at) * 1000)
            self.call_at = None
        async for output in self.inner.generate(request_id, prompt, sampling):
            if output.finished and CALL in output.token_ids:
                self.call_at = time.perf_counter()
            yield output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=200)
    args = parser.parse_args()
    redis_server = start_redis()
    try:
        with mcp_server(*CALCULATOR) as url, tempfile.TemporaryDirectory() as directory:
            run(args.responses, f"redis://127.0.0.1:{redis_server.port}/0", f"sqlite:///{directory}/bench.db", url)
    finally:
        redis_server.stop()


def run(responses: int, redis_url: str, database_url: str, url: str) -> None:
    migrate(database_url)
    settings = worker_settings(database_url, redis_url, tool_servers={"code_interpreter": url})
    encoding = load_encoding(settings.tiktoken_dir)
    engine = TimingEngine(ScriptedEngine.from_settings(settings, encoding))
    db, redis = Database(database_url), redis_lib.Redis.from_url(redis_url)
    body = {"input": "call python 123*456", "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}
    with local_worker(settings, engine=engine) as worker:
        for _ in range(responses + 1):  # the first (warm-up: first call on the session) not counted
            response_id = accept(db, redis, settings, **body)
            assert run_response_now(response_id, worker=worker) == "completed"
    record = db.run(get_response, response_id)
    assert record is not None and "56088" in record.response["output"][-1]["content"][0]["text"]
    gaps = engine.gaps_ms[1:]
    print(f"responses: {len(gaps)} (one tool turn each, session reused)")
    print(f"first tool turn (warm-up, not counted): {engine.gaps_ms[0]:.2f} ms")
    p50 = percentile(gaps, 0.5)
    print(f"tool turn in the worker p50: {p50:.2f} ms")
    print(f"tool turn in the worker p99: {percentile(gaps, 0.99):.2f} ms")
    print(f"tool_turn_worker_p50: {p50:.2f} ms")
    db.dispose()
    redis.close()


if __name__ == "__main__":
    main()
