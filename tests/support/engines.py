"""Engines of the tool-turn tests (and benches): a wrapper of the scripted engine that passes the engine
calls through, one keeping every prompt it was shown, one that dies as vLLM's does when its engine core
is lost, and an engine answering its n-th generation with the n-th of a list of harmony texts;
``streamed``, the outputs an engine's ``stream`` hands over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from openai_harmony import HarmonyEncoding

from oss_responses.engine.base import EngineDead, EngineOutput, OutputStreaming, SamplingSettings
from oss_responses.engine.scripted import ScriptedEngine


async def streamed(
    engine: OutputStreaming, request_id: str, prompt: Sequence[int], sampling: SamplingSettings
) -> list[EngineOutput]:
    """The outputs ``engine.stream`` hands to its callback, in order."""
    outputs: list[EngineOutput] = []
    await engine.stream(request_id, prompt, sampling, outputs.append)
    return outputs


class WrappedEngine:
    """The scripted engine behind a wrapper: ``generate``/``abort``/``start``/``shutdown`` pass through
    (``stream`` does not: the worker takes outputs through ``generate``); a subclass watches ``generate``."""

    def __init__(self, inner: ScriptedEngine) -> None:
        self.inner = inner

    def generate(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingSettings
    ) -> AsyncIterator[EngineOutput]:
        return self.inner.generate(request_id, prompt, sampling)

    @property
    def context_tokens(self) -> int | None:
        return self.inner.context_tokens

    async def abort(self, request_id: str) -> None:
        await self.inner.abort(request_id)

    async def start(self) -> None:
        await self.inner.start()

    async def shutdown(self) -> None:
        await self.inner.shutdown()


class RecordingEngine(WrappedEngine):
    """The scripted engine, keeping every prompt it was given (to read what the model was shown)."""

    def __init__(self, inner: ScriptedEngine, encoding: HarmonyEncoding) -> None:
        super().__init__(inner)
        self.encoding = encoding
        self.prompts: list[list[int]] = []

    def generate(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingSettings
    ) -> AsyncIterator[EngineOutput]:
        self.prompts.append(list(prompt))
        return self.inner.generate(request_id, prompt, sampling)

    def prompt_text(self, index: int = -1) -> str:
        return self.encoding.decode(self.prompts[index])


class DyingEngine(WrappedEngine):
    """The scripted engine until ``outputs`` outputs have gone out, then dead for good: the running request
    and every later call raise :class:`EngineDead`, as vLLM's do once its engine core died."""

    def __init__(self, inner: ScriptedEngine, outputs: int) -> None:
        super().__init__(inner)
        self.left = outputs

    async def generate(  # type: ignore[override]  # an async generator where the base returns one
        self, request_id: str, prompt: Sequence[int], sampling: SamplingSettings
    ) -> AsyncIterator[EngineOutput]:
        async for output in self.inner.generate(request_id, prompt, sampling):
            if self.left <= 0:
                raise EngineDead("the engine core stopped (a test's)")
            self.left -= 1
            yield output
        if self.left <= 0:
            raise EngineDead("the engine core stopped (a test's)")


class SequenceEngine:
    """Answers its n-th generation with the n-th harmony text (one token per output)."""

    def __init__(self, encoding: HarmonyEncoding, texts: Sequence[str]) -> None:
        self.answers = [encoding.encode(text, allowed_special="all") for text in texts]
        self.generations = 0

    async def generate(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingSettings
    ) -> AsyncIterator[EngineOutput]:
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
