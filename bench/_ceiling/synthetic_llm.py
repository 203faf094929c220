"""A stand-in for vLLM's ``AsyncLLM`` that steps like a GPU with an infinitely fast model.

``add_request`` returns vLLM's own ``RequestOutputCollector``, and each step ``put``s real
``vllm.outputs.RequestOutput`` objects in it (one ``CompletionOutput``, DELTA token ids, ``finished``
and ``finish_reason`` as vLLM sets them), as vLLM's output handler does; ``generate`` takes them
from it as ``AsyncLLM.generate`` does. So the worker's ``VllmEngine`` adapter runs unchanged on top,
``stream`` and ``generate`` alike. One stepper task plays the engine core: each step gives every
running request ONE token, and the next step starts as soon as every request took its previous
output (steps as fast as the worker takes them; vLLM would merge deltas a consumer did not take yet,
here the consumer is never behind by more than one token, its most expensive case). With
``step_seconds`` a step starts no sooner than that after the previous one, as a GPU's forward pass
paces them: then every step pays the loop's fixed costs (a wake, a flush) for its few tokens. The
tokens are the scripted engine's answer to the prompt, so the translator sees valid harmony.

A request whose sampling parameters set ``stream_interval`` N gets its tokens as vLLM's output
processor hands them over: the first at once, then N at a time, the last with the finish. Its token
still advances every step; a step in which no request has an output to take goes on to the next.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.output_processor import RequestOutputCollector

from oss_responses.engine.vllm import ScriptedAnswers


@dataclass
class _Request:
    request_id: str
    script: list[int]
    max_tokens: int
    stop: frozenset[int]
    interval: int = 1
    position: int = 0
    held: list[int] = field(default_factory=list)  # generated, not handed over yet (stream_interval)
    aborted: bool = False
    queue: RequestOutputCollector = field(init=False)

    def __post_init__(self) -> None:
        self.queue = RequestOutputCollector(RequestOutputKind.DELTA, self.request_id)


@dataclass
class StepSample:
    at: float  # monotonic seconds
    cpu: float  # loop thread CPU seconds
    tokens: int  # tokens produced so far
    running: int


class SyntheticLLM:
    def __init__(self, answers: ScriptedAnswers, *, max_model_len: int = 131_072, step_seconds: float = 0.0) -> None:
        self.step_seconds = step_seconds
        self.model_config = SimpleNamespace(max_model_len=max_model_len)
        self._answers = answers
        self._requests: dict[str, _Request] = {}
        self._taken = asyncio.Event()
        self._outstanding = 0  # outputs of the last step not taken yet
        self._stepper: asyncio.Task[None] | None = None
        self.tokens = 0
        self.samples: list[StepSample] = []

    async def add_request(self, request_id: str, prompt: Any, sampling_params: Any) -> RequestOutputCollector:
        script = self._answers.script_for(prompt["prompt_token_ids"]) or []
        request = _Request(request_id, script, sampling_params.max_tokens, frozenset(sampling_params.stop_token_ids),
                           interval=sampling_params.stream_interval or 1)
        self._requests[request_id] = request
        if self._stepper is None:
            self._stepper = asyncio.get_running_loop().create_task(self._step_forever())
        self._taken.set()
        return request.queue

    async def generate(self, prompt: Any, sampling_params: Any, request_id: str) -> AsyncIterator[RequestOutput]:
        queue = await self.add_request(request_id, prompt, sampling_params)
        try:
            while True:
                output = queue.get_nowait() or await queue.get()
                assert isinstance(output, RequestOutput)
                self._took()
                yield output
                if output.finished:
                    return
        finally:
            self._requests.pop(request_id, None)
            if queue.get_nowait() is not None:
                self._took()
            self._taken.set()

    def _took(self) -> None:
        self._outstanding -= 1
        if self._outstanding <= 0:
            self._taken.set()

    async def abort(self, request_id: str) -> None:
        request = self._requests.get(request_id)
        if request is not None:
            request.aborted = True

    def shutdown(self) -> None:
        if self._stepper is not None:
            self._stepper.cancel()

    async def _step_forever(self) -> None:
        stepped = time.monotonic()
        while True:
            await self._taken.wait()
            self._taken.clear()
            if self._outstanding > 0:
                continue  # somebody has not taken the last step yet
            if self.step_seconds:
                await asyncio.sleep(max(0.0, stepped + self.step_seconds - time.monotonic()))
                stepped = time.monotonic()
            running = len(self._requests)
            self._outstanding = 0
            for request in list(self._requests.values()):
                output = self._next_output(request)
                if output is None:
                    continue
                if output.finished:
                    self._requests.pop(request.request_id, None)
                request.queue.put(output)
                if request.queue.output is not None:  # waits for a generate() to take it (stream() took it)
                    self._outstanding += 1
            if running:
                self.samples.append(StepSample(time.monotonic(), time.thread_time(), self.tokens, running))
            else:
                await asyncio.sleep(0.001)
            if self._outstanding == 0:  # nobody has an output to take (or it was taken at once): the next step
                self._taken.set()
                await asyncio.sleep(0)  # as vLLM's output handler awaits the engine core's next output

    def _next_output(self, request: _Request) -> RequestOutput | None:
        """The request's output of this step; None while its stream interval holds its tokens back."""
        if request.aborted:
            return _output(request.request_id, request.held, "abort")
        token = request.script[request.position] if request.position < len(request.script) else 200_002
        request.position += 1
        self.tokens += 1
        request.held.append(token)
        reason = "stop" if token in request.stop else "length" if request.position >= request.max_tokens else None
        if reason is None and request.position > 1 and len(request.held) < request.interval:
            return None
        held, request.held = request.held, []
        return _output(request.request_id, held, reason)


def _output(request_id: str, token_ids: list[int], finish_reason: str | None) -> RequestOutput:
    completion = CompletionOutput(index=0, text="", token_ids=token_ids, cumulative_logprob=None, logprobs=None,
                                  finish_reason=finish_reason)
    return RequestOutput(request_id=request_id, prompt=None, prompt_token_ids=None, prompt_logprobs=None,
                         outputs=[completion], finished=finish_reason is not None, num_cached_tokens=0)
