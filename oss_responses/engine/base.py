"""The engine interface every worker engine implements (scripted, vLLM).

An engine is driven from one asyncio event loop (the worker's engine loop thread). ``generate``
is an async generator of token-id deltas for one request; ``abort`` stops a request early, after
which its generator ends (without raising) within a second.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

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


class Engine(Protocol):
    def generate(
        self, request_id: str, prompt_token_ids: Sequence[int], sampling: SamplingSettings
    ) -> AsyncIterator[EngineOutput]: ...

    async def abort(self, request_id: str) -> None: ...

    async def start(self) -> None:
        """Bring the engine up (load weights...). Called once on the engine loop."""

    async def shutdown(self) -> None: ...
