"""One response's generation on the engine loop: engine tokens → translator → event log.

A :class:`Generation` streams the engine's outputs into the translator and buffers the events (and
the generated token ids, the response's progress) in the shared :class:`EventWriter`. A message to an
MCP tool pauses generation (a message to a tool the request did not offer gets an error as the
tool's answer): the tool runs, its result goes back into the translator, and generation
continues on prompt + generated + the tool message. A function call (the client runs it), an
approval request or the ``max_tool_calls`` limit ends the response. An answered approval (the prompt
then ends after the pending call) is run or declined before the first generation. Cancel and a lost lease abort the engine request; the loop then ends within a step.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Literal

from oss_responses.engine.base import Engine, FinishReason, SamplingSettings
from oss_responses.eventlog.writer import EventWriter
from oss_responses.harmony.history import ApprovalAnswer
from oss_responses.harmony.translator import UNAVAILABLE, PendingToolCall, ResponseTranslator
from oss_responses.tools.executor import ToolExecutor, ToolOutcome

log = logging.getLogger(__name__)

StopCause = Literal["cancelled", "lease_lost"]
TERMINAL = frozenset({"completed", "incomplete", "failed", "cancelled"})


@dataclass(slots=True)
class TurnResult:
    reason: FinishReason
    cached_tokens: int | None = None


@dataclass
class Generation:
    response_id: str
    engine: Engine
    writer: EventWriter
    translator: ResponseTranslator
    tools: ToolExecutor
    sampling: SamplingSettings  # max_tokens = the whole output budget
    stop_cause: StopCause | None = None
    _stopped: asyncio.Event = field(default_factory=asyncio.Event)
    _request_id: str | None = None
    _generated: int = 0
    _generated_tokens: list[int] = field(default_factory=list)
    _turn: int = 0
    # Usage as OpenAI counts it: every engine call's whole prompt is input, its prefix-cache hits cached.
    _input_tokens: int = 0
    _cached_tokens: int = 0
    _abort: asyncio.Task[None] | None = None  # held so the abort task is not garbage-collected

    # --- stopping from outside (cancel listener, lease keeper) ------------
    def stop(self, cause: StopCause) -> None:
        if self.stop_cause is None:
            self.stop_cause = cause
        self._stopped.set()
        if self._request_id is not None:
            self._abort = asyncio.get_running_loop().create_task(self.engine.abort(self._request_id))

    # --- the run -----------------------------------------------------------
    def emit(self, events: list) -> None:  # type: ignore[type-arg]
        if events:
            self.writer.append(self.response_id, events)

    async def run(self, prompt_token_ids: list[int], approval: ApprovalAnswer | None = None) -> None:
        """Generate to the end; the translator then holds the final Response (unless lease_lost).

        With ``approval`` (the input answers an approval request; the prompt ends after that call)
        the call is run or declined first, and generation continues after its tool message.
        """
        self.emit(self.translator.start())
        tokens = list(prompt_token_ids)
        if approval is not None:
            if not await self._answer(approval):
                self._finish_stopped()
                return
            tokens += self.translator.continuation_token_ids()
        while True:
            result = await self._generate(tokens)
            if self.stop_cause is not None or self._is_terminal():
                break
            call = self.translator.pending_tool_call
            if result.reason != "stop" or call is None or call.kind == "function":
                self._finish(result)
                return
            if call.kind == "unavailable":
                self.emit(self.translator.feed_tool_result(None, UNAVAILABLE.format(recipient=call.recipient)))
            elif not await self._run_tool(call):
                break
            if self._budget() <= 0:
                self._finish(TurnResult("length"))
                return
            tokens += self._generated_tokens + self.translator.continuation_token_ids()
        self._finish_stopped()

    def _finish(self, result: TurnResult) -> None:
        if result.reason == "abort":  # aborted by the engine itself, not by us
            self.emit(self.translator.fail("The engine aborted the generation."))
            return
        self.emit(self.translator.finish(result.reason, **self._usage()))

    def _usage(self) -> dict[str, int]:
        return {"cached_tokens": self._cached_tokens, "input_tokens": self._input_tokens}

    def _finish_stopped(self) -> None:
        if self.stop_cause == "cancelled":
            self.emit(self.translator.finish("abort", **self._usage()))
        # lease_lost: write nothing more; whoever holds the response now ends it

    def _is_terminal(self) -> bool:
        return self.translator.response.status in TERMINAL

    def _budget(self) -> int:
        return self.sampling.max_tokens - self._generated

    async def _generate(self, tokens: list[int]) -> TurnResult:
        self._turn += 1
        self._request_id = f"{self.response_id}:{self._turn}"
        self._generated_tokens = []
        sampling = SamplingSettings(
            max_tokens=self._budget(), stop_token_ids=self.sampling.stop_token_ids,
            temperature=self.sampling.temperature, top_p=self.sampling.top_p, seed=self.sampling.seed,
            extra=self.sampling.extra,
        )
        if self._stopped.is_set():
            return TurnResult("abort")
        self._input_tokens += len(tokens)
        try:
            return await self._stream(tokens, sampling)
        finally:
            self._request_id = None

    async def _stream(self, tokens: list[int], sampling: SamplingSettings) -> TurnResult:
        result = TurnResult("stop")
        async for output in self.engine.generate(self._request_id or "", tokens, sampling):
            if output.cached_tokens is not None and result.cached_tokens is None:
                result.cached_tokens = output.cached_tokens
                self._cached_tokens += output.cached_tokens
            if output.token_ids:
                self._generated += len(output.token_ids)
                self._generated_tokens += output.token_ids
                self.writer.append_progress(self.response_id, output.token_ids)
                self.emit(self.translator.feed(output.token_ids))
            if output.finished:
                result.reason = output.finish_reason or "stop"
            if self._is_terminal() and not output.finished:  # invalid harmony: stop generating
                await self.engine.abort(self._request_id or "")
        return result

    async def _answer(self, approval: ApprovalAnswer) -> bool:
        """An approved call runs now (an mcp_call item); a declined one only tells the model so."""
        if not approval.approve:
            self.emit(self.translator.decline_call(approval))
            return True
        self.emit(self.translator.open_approved_call(approval))
        call = self.translator.pending_tool_call
        return call is not None and await self._run_tool(call)

    async def _run_tool(self, call: PendingToolCall) -> bool:
        """Run an MCP call and feed its result; False if stopped meanwhile."""
        assert call.server_label is not None
        task = asyncio.ensure_future(self.tools.call(call.server_label, call.name, call.arguments))
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not task.done():
            task.cancel()
            return False
        outcome = _outcome(task)
        self.emit(self.translator.feed_tool_result(outcome.output, outcome.error))
        return True


def _outcome(task: asyncio.Future[ToolOutcome]) -> ToolOutcome:
    error = task.exception()
    if error is not None:
        log.warning("tool call raised %r", error)
        return ToolOutcome(error=f"the tool call failed ({type(error).__name__})")
    return task.result()
