"""A Generation takes an engine's outputs the same way whether the engine yields them (``generate``) or
hands them to a callback (``stream``, as the vLLM engine does from its output handler).

Pure in-process runs (a list for the event log); see ``support/replay.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from openai_harmony import HarmonyEncoding
from support.engines import WrappedEngine
from support.replay import Run, wire

from oss_responses.engine.base import EngineOutput, OutputSink, OutputStreaming, SamplingSettings
from oss_responses.engine.scripted import ScriptedEngine
from oss_responses.vocab import load_encoding

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def encoding() -> HarmonyEncoding:
    return load_encoding(REPO / "var" / "tiktoken")


class TokensEngine:
    """Yields its tokens ``chunk`` per output until they run out (then "length") or it is aborted."""

    def __init__(self, tokens: Sequence[int], chunk: int = 1) -> None:
        self.tokens = list(tokens)
        self.chunk = chunk
        self.aborts = 0
        self.generated = 0
        self._aborted = False

    async def generate(
        self, request_id: str, prompt_token_ids: Sequence[int], sampling: SamplingSettings
    ) -> AsyncIterator[EngineOutput]:
        for start in range(0, len(self.tokens), self.chunk):
            await asyncio.sleep(0)
            if self._aborted:
                yield EngineOutput([], finished=True, finish_reason="abort")
                return
            output = self.tokens[start:start + self.chunk]
            self.generated += len(output)
            yield EngineOutput(output)
        yield EngineOutput([], finished=True, finish_reason="length")

    async def abort(self, request_id: str) -> None:
        self.aborts += 1
        self._aborted = True


class Streaming:
    """Mixed in before an engine: its ``generate`` outputs handed to a callback (``stream``)."""

    async def stream(
        self, request_id: str, prompt_token_ids: Sequence[int], sampling: SamplingSettings, on_output: OutputSink
    ) -> None:
        async for output in self.generate(request_id, prompt_token_ids, sampling):  # type: ignore[attr-defined]
            on_output(output)


class StreamingTokensEngine(Streaming, TokensEngine):
    """The same outputs, handed to a callback."""


def test_streaming_engine_gives_the_events_of_a_generating_one(encoding: HarmonyEncoding) -> None:
    def stepping() -> ScriptedEngine:  # on its step clock, the scripted engine streams as vLLM's does
        return ScriptedEngine(encoding, step_interval_seconds=0.001)

    assert isinstance(stepping(), OutputStreaming)
    assert not isinstance(WrappedEngine(stepping()), OutputStreaming)

    for text in ("tokens 40", "Hello there"):
        generated, _ = Run(encoding, text, engine=WrappedEngine(stepping())).uninterrupted()
        streamed, _ = Run(encoding, text, engine=stepping()).uninterrupted()

        assert wire(streamed) == wire(generated)
        assert streamed[-1].type == "response.completed"


@pytest.mark.parametrize("engine_class", [TokensEngine, StreamingTokensEngine])
def test_invalid_harmony_fails_response_and_aborts_engine_once(
    encoding: HarmonyEncoding, engine_class: type[TokensEngine]
) -> None:
    invalid = encoding.encode("<|channel|>final<|message|>Hi.<|end|>stray text<|message|>", allowed_special="all")
    engine = engine_class(invalid + encoding.encode(" more" * 50))

    events, _ = Run(encoding, "anything", engine=engine).uninterrupted()  # type: ignore[arg-type]

    assert events[-1].type == "response.failed"
    assert engine.aborts == 1
    assert not [e for e in events if e.type == "response.output_text.delta" and "more" in e.delta]


@pytest.mark.parametrize("engine_class", [TokensEngine, StreamingTokensEngine])
def test_invalid_harmony_usage_counts_tokens_generated_before_abort(
    encoding: HarmonyEncoding, engine_class: type[TokensEngine]
) -> None:
    # The output holding the invalid token goes on after it: those tokens were generated, and count.
    valid = encoding.encode("<|channel|>final<|message|>Hi.<|end|>", allowed_special="all")
    engine = engine_class(valid + encoding.encode(" stray" * 50), chunk=4)

    events, _ = Run(encoding, "anything", engine=engine).uninterrupted()  # type: ignore[arg-type]

    failed = events[-1].response
    assert failed.status == "failed" and "not valid harmony" in failed.error.message
    assert engine.generated > len(valid) + 1  # the first stray token is the invalid one
    assert failed.usage.output_tokens == engine.generated
