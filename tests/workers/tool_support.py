"""Helpers of the tool-turn tests: MCP servers as processes, engines that record or follow a script,
and the stream check every tool test applies (openai's event types and the SDK's accumulator)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent
from openai_harmony import HarmonyEncoding
from pydantic import TypeAdapter
from support.servers import free_port
from worker_support import REPO

from oss_responses.engine.base import EngineOutput, SamplingSettings
from oss_responses.engine.scripted import ScriptedEngine
from support.mcp import wait_listening
from support.sdk import without_parsed

MISBEHAVING = REPO / "tests" / "tools" / "misbehaving_server.py"
_events = TypeAdapter(ResponseStreamEvent)


@contextmanager
def mcp_server(*command: str) -> Iterator[str]:
    """An MCP server process on a free loopback port; its Streamable HTTP URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, *command, "--port", str(port)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(proc, port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class RecordingEngine:
    """The scripted engine, keeping every prompt it was given (to read what the model was shown)."""

    def __init__(self, inner: ScriptedEngine, encoding: HarmonyEncoding) -> None:
        self.inner = inner
        self.encoding = encoding
        self.prompts: list[list[int]] = []

    def generate(self, request_id: str, prompt: Sequence[int], sampling: SamplingSettings) -> AsyncIterator[EngineOutput]:
        self.prompts.append(list(prompt))
        return self.inner.generate(request_id, prompt, sampling)

    def prompt_text(self, index: int = -1) -> str:
        return self.encoding.decode(self.prompts[index])

    async def abort(self, request_id: str) -> None:
        await self.inner.abort(request_id)

    async def start(self) -> None:
        await self.inner.start()

    async def shutdown(self) -> None:
        await self.inner.shutdown()


class SequenceEngine:
    """Answers its n-th generation with the n-th harmony text (one token per output)."""

    def __init__(self, encoding: HarmonyEncoding, texts: Sequence[str]) -> None:
        self.answers = [encoding.encode(text, allowed_special="all") for text in texts]
        self.generations = 0

    async def generate(self, request_id: str, prompt: Sequence[int], sampling: SamplingSettings) -> AsyncIterator[EngineOutput]:
        tokens = self.answers[self.generations]
        self.generations += 1
        for index, token in enumerate(tokens):
            await asyncio.sleep(0)
            last = index == len(tokens) - 1
            yield EngineOutput([token], finished=last, finish_reason="stop" if last else None)

    async def abort(self, request_id: str) -> None:
        return None

    async def start(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None


def check_stream(events: list[dict[str, Any]], response: dict[str, Any]) -> None:
    """Every event is one of openai's; numbering and indices hold; the SDK rebuilds the stored output."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    models = [_events.validate_python(event) for event in events]
    added = [e.output_index for e in models if e.type == "response.output_item.added"]
    done = [e.output_index for e in models if e.type == "response.output_item.done"]
    assert added == list(range(len(added))) == done
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for model in models:
        state.handle_event(model)
    if response["status"] == "cancelled":  # OpenAI defines no terminal event for it
        return
    rebuilt = state._completed_response
    assert rebuilt is not None
    assert [without_parsed(item.to_dict()) for item in rebuilt.output] == response["output"]



