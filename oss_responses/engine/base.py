"""The engine interface every worker engine implements (scripted, vLLM).

An engine is driven from one asyncio event loop (the worker's engine loop thread). ``generate``
is an async generator of token-id deltas for one request; ``abort`` stops a request early, after
which its generator ends (without raising) within a second.

An engine may also ``stream``: hand each output to a callback as it arrives, instead of waking a
consumer task per output (:func:`stream_outputs` takes whichever the engine offers). The vLLM engine
does, from vLLM's own output handler: one wake per engine step for every running request, not one
per request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from oss_responses.statuses import FinishReason


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    max_tokens: int
    stop_token_ids: Sequence[int] = ()
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    # Engine-specific passthrough (e.g. a forced token script for vLLM tests).
    extra: dict[str, Any] = field(default_factory=dict)
    # Tokens per output after the first (vLLM's stream_interval): the last output always comes at once.
    stream_interval: int = 1


@dataclass(frozen=True, slots=True)
class EngineOutput:
    """One step's new tokens for one request.

    ``token_ids`` includes a stop token when generation stopped on one (the harmony parser needs it
    to close the message). ``cached_tokens`` is the number of prompt tokens served from the prefix
    cache; engines report it on the first output (None when unknown).
    """

    token_ids: Sequence[int]
    finished: bool = False
    finish_reason: FinishReason | None = None
    cached_tokens: int | None = None


class PromptTooLongError(ValueError):
    """The prompt leaves no room for output within the model's context."""


class EngineDead(RuntimeError):
    """The engine stopped for good (vLLM's engine core died: a GPU fault, an OOM kill, a crash): no request
    runs on it again. Not the request's doing: its response goes on with another worker, and this one
    stops so that its supervisor starts a new engine (``WorkerContext.lose_engine``)."""


class SchemaNotConstrainable(ValueError):
    """A schema the engine cannot constrain output to: its grammar cannot express it, or takes too long to
    compile (``engine/grammar.py``)."""


def check_prompt_length(prompt_token_ids: Sequence[int], context_tokens: int) -> None:
    # vLLM rejects it too, but with its own wording; the worker adds what the user can do about it.
    if len(prompt_token_ids) >= context_tokens:
        raise PromptTooLongError(
            # OpenAI's words first: clients that cannot see its code (context_length_exceeded, not among
            # openai's ResponseError codes) match on them to compact and retry.
            f"Your input exceeds the context window of this model: the prompt is {len(prompt_token_ids)} tokens, "
            f"the model's context is {context_tokens} tokens."
        )


@runtime_checkable
class ContextLimited(Protocol):
    """An engine whose model reads at most ``context_tokens`` tokens, prompt and output together."""

    @property
    def context_tokens(self) -> int | None: ...


class Engine(Protocol):
    def generate(
        self, request_id: str, prompt_token_ids: Sequence[int], sampling: SamplingSettings
    ) -> AsyncIterator[EngineOutput]: ...

    async def abort(self, request_id: str) -> None: ...

    async def start(self) -> None:
        """Bring the engine up (load weights...). Called once on the engine loop."""

    async def shutdown(self) -> None: ...


OutputSink = Callable[[EngineOutput], None]


@runtime_checkable
class OutputStreaming(Protocol):
    async def stream(
        self, request_id: str, prompt_token_ids: Sequence[int], sampling: SamplingSettings, on_output: OutputSink
    ) -> None:
        """``generate`` as callbacks: ``on_output`` gets each output in order; returns after the last
        one (finished), raises what the engine or ``on_output`` raised. ``on_output`` must not block."""


async def stream_outputs(
    engine: Engine, request_id: str, prompt_token_ids: Sequence[int], sampling: SamplingSettings,
    on_output: OutputSink,
) -> None:
    """Each output of the request to ``on_output``, through the engine's ``stream`` where it has one."""
    if isinstance(engine, OutputStreaming):
        await engine.stream(request_id, prompt_token_ids, sampling, on_output)
        return
    async for output in engine.generate(request_id, prompt_token_ids, sampling):
        on_output(output)
