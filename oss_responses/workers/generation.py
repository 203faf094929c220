"""One response's generation on the engine loop: engine tokens → translator → event log.

A :class:`Generation` streams the engine's outputs into the translator and buffers the events (and
the generated token ids, the response's progress) in the shared :class:`EventWriter`. A message to an
MCP tool pauses generation (a message to a tool the request did not offer gets an error as the
tool's answer): the tool runs, its result goes back into the translator, and generation
continues on prompt + generated + the tool message. A function call (the client runs it), an
approval request or the ``max_tool_calls`` limit ends the response. An answered approval (the prompt
then ends after the pending call) is run or declined before the first generation. Cancel, a lost
lease and a handoff abort the engine request; the loop then ends within a step.

A generation taken over from a lost worker is first rebuilt from its journal (:meth:`replay`), then
goes on (:meth:`resume`): mid-message, the engine continues from prompt + the tokens generated so far;
an MCP call that was in flight runs again only if the tool is idempotent, else the model reads that
it was interrupted.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

from openai.types.responses import ResponseStreamEvent

from oss_responses.engine.base import Engine, EngineOutput, SamplingSettings, stream_outputs
from oss_responses.eventlog.writer import EventWriter
from oss_responses.harmony.history import ApprovalAnswer
from oss_responses.harmony.translator import UNAVAILABLE, PendingToolCall, ResponseTranslator
from oss_responses.harmony.truncation import last_start, steps_to_drop
from oss_responses.metrics import OUTPUT_TOKENS, TIME_TO_FIRST_TOKEN
from oss_responses.statuses import TERMINAL_STATUSES, FinishReason
from oss_responses.tools.executor import ToolExecutor, ToolOutcome
from oss_responses.workers.journal import apply_translator_step

log = logging.getLogger(__name__)

# handoff: the worker is shutting down and gives the response to another worker.
StopCause = Literal["cancelled", "lease_lost", "handoff"]


@dataclass(slots=True)
class TurnResult:
    reason: FinishReason
    cached_tokens: int | None = None


@dataclass(slots=True)
class _Turn:
    """One engine call's outputs so far, as ``Generation._take_output`` sees them."""

    counted: bool  # a new turn (not a taken-over one continued): its cached tokens count
    first_pending: bool  # the response's first token is still to come
    result: TurnResult = field(default_factory=lambda: TurnResult("stop"))
    aborted: bool = False  # the engine was asked to abort it (invalid harmony)


INTERRUPTED = (
    "the worker running this tool call stopped before it answered; the call was not run again "
    "(the tool is not marked idempotent)"
)


@dataclass
class Generation:
    """``journal`` records the generation's own steps (the translator records its calls itself)."""

    response_id: str
    engine: Engine
    writer: EventWriter
    translator: ResponseTranslator
    tools: ToolExecutor
    sampling: SamplingSettings  # max_tokens = the whole output budget
    journal: Callable[[list[Any]], None] | None = None
    # A call in flight when a lost worker stopped runs again only if this says so (server, tool).
    is_idempotent: Callable[[str, str], bool] = lambda server, tool: False
    stop_cause: StopCause | None = None
    _stopped: asyncio.Event = field(default_factory=asyncio.Event)
    _request_id: str | None = None
    # The model's whole context so far: prompt + generated tokens + tool messages.
    _tokens: list[int] = field(default_factory=list)
    _generated: int = 0
    _turn: int = 0
    # Usage as OpenAI counts it: every engine call's whole prompt is input, its prefix-cache hits cached.
    _input_tokens: int = 0
    _cached_tokens: int = 0
    _aborts: set[asyncio.Task[None]] = field(default_factory=set)
    # The next engine call continues a turn a lost worker began: not a new turn, so its prompt is not
    # counted as input again (the response's usage is that of an uninterrupted run).
    _continuing: bool = False
    _in_turn: bool = False  # replay: the journal ends inside an engine call (no tool message after it)
    _answered: bool = False  # replay: the journal ends after a tool message, before its continuation
    # Time to first token: observed once per response (not again by a worker taking it over).
    _first_token_seen: bool = False
    _forced_turn: bool = False  # the next engine call continues the forced start of a call (run's ``forced``)
    # truncation "auto": the most tokens the context may hold before an engine call (None: never cut).
    context_budget: int | None = None
    _steps: list[int] = field(default_factory=list)  # where this response's own tool steps begin in _tokens

    # --- stopping from outside (cancel listener, lease keeper, shutdown) -----
    def stop(self, cause: StopCause) -> None:
        if self.stop_cause is None:
            self.stop_cause = cause
        self._stopped.set()
        if self._request_id is not None:
            self._abort_request()

    def _abort_request(self) -> None:
        """Ask the engine to end the running request (it then finishes with reason "abort")."""
        task = asyncio.get_running_loop().create_task(self.engine.abort(self._request_id or ""))
        self._aborts.add(task)  # held: the loop keeps only a weak reference to a task
        task.add_done_callback(self._aborts.discard)

    # --- the run -----------------------------------------------------------
    def emit(self, events: list[ResponseStreamEvent]) -> None:
        if events:
            self.writer.append(self.response_id, events)

    async def run(
        self, prompt_token_ids: list[int], approval: ApprovalAnswer | None = None, forced: list[int] | None = None
    ) -> None:
        """Generate to the end; the translator then holds the final Response (unless stopped for a handoff).

        With ``approval`` (the input answers an approval request; the prompt ends after that call)
        the call is run or declined first, and generation continues after its tool message. With
        ``forced`` (``tool_choice`` makes the model call a function: the start of that call's header),
        the first engine call begins with those tokens as if the model had written them.
        """
        self.emit(self.translator.start())
        self._begin_context(prompt_token_ids, approval)
        if approval is not None:
            if not await self._answer(approval):
                self._finish_stopped()
                return
            self._continue()
        elif forced:
            self._force(forced)
        await self._loop()

    def _force(self, token_ids: list[int], *, begun: bool = False) -> None:
        # Journaled as the start of an engine call (its first "feed"), so a worker taking the
        # response over replays them and continues after them, as after any generated tokens.
        if not begun:
            self._note("engine_call")
            self._begin_turn()
        self.emit(self._take_tokens(token_ids))
        self._forced_turn = True

    def replay(
        self, prompt_token_ids: list[int], steps: list[list[Any]], approval: ApprovalAnswer | None
    ) -> list[ResponseStreamEvent]:
        """Rebuild the state a lost worker had from its journal (from ``use_prompt`` on); the events replayed."""
        self._begin_context(prompt_token_ids, approval)
        self._first_token_seen = True  # the lost worker observed it (or the time would count the loss)
        events: list[ResponseStreamEvent] = []
        for step in steps:
            kind = step[0]
            if kind == "engine_call":
                self._begin_turn()
                self._in_turn = True
            elif kind == "resume_call":
                self._in_turn = True
            elif kind == "cached":
                self._cached_tokens += step[1]
            elif kind == "feed":
                events += self._take_tokens(step[1])
            elif kind == "continuation":
                self._continue()
                self._in_turn = self._answered = False
            else:
                events += apply_translator_step(self.translator, step, approval)
                if kind in ("feed_tool_result", "decline_call"):
                    self._in_turn, self._answered = False, True
        return events

    async def resume(self, forced: list[int] | None = None) -> None:
        """Go on from where a replayed journal ends (mid-message, at a pending call, or ended).
        ``forced`` as for :meth:`run`: written if the lost worker had not begun the first engine call."""
        if self._is_terminal():
            return
        if self.translator.halted:  # the lost worker's output was invalid: only its failure is left to state
            self._finish(TurnResult("stop"))
            return
        if forced and self._generated == 0 and not self._answered and self.translator.pending_tool_call is None:
            self._force(forced, begun=self._in_turn)  # the journal may end between the two steps
            await self._loop()
            return
        call = self.translator.pending_tool_call
        self._continuing = call is None and self._in_turn
        if self._continuing and (self._tokens[-1] in self.sampling.stop_token_ids or self._budget() <= 0):
            # The engine call had ended (a stop token, or the budget spent) before it was lost.
            self._finish(TurnResult("stop" if self._tokens[-1] in self.sampling.stop_token_ids else "length"))
            return
        if self._answered:  # the tool message is in, its continuation not yet
            if not self._next_turn():
                return
        elif call is not None:
            if call.kind == "function":
                self._finish(TurnResult("stop"))
                return
            if not await self._answer_call(call, resumed=True):
                self._finish_stopped()
                return
            if not self._next_turn():
                return
        await self._loop()

    async def _loop(self) -> None:
        while True:
            # A forced call's start can spend a budget smaller than itself (max_output_tokens).
            result = await self._generate() if self._budget() > 0 else TurnResult("length")
            if self.stop_cause is not None or self._is_terminal():
                break
            call = self.translator.pending_tool_call
            if result.reason != "stop" or call is None or call.kind == "function":
                self._finish(result)
                return
            if not await self._answer_call(call):
                break
            if not self._next_turn():
                return
        self._finish_stopped()

    def _next_turn(self) -> bool:
        """After a tool message: False (the response finished) if the budget is spent, else the
        message and the next assistant start join the context."""
        if self._budget() <= 0:
            self._finish(TurnResult("length"))
            return False
        self._continue()
        return True

    def _begin_context(self, prompt_token_ids: list[int], approval: ApprovalAnswer | None) -> None:
        self._tokens = list(prompt_token_ids)
        # A prompt for completion ends with the assistant's start: the response's first step begins there.
        # (After an answered approval the prompt ends with the call: its step is the prompt's.)
        start = last_start(self._tokens) if self.context_budget is not None and approval is None else None
        self._steps = [start] if start is not None else []

    def _continue(self) -> None:
        """After a tool message: it and the next assistant start join the context."""
        self._tokens += self.translator.continuation_token_ids()
        if self.context_budget is not None:
            self._fit_context(self.context_budget)

    def _fit_context(self, budget: int) -> None:
        """truncation "auto": once the context outgrows ``budget``, the response's own earliest tool steps
        leave it, whole (``harmony/truncation.py``). A worker replaying the journal cuts alike, at the same
        continuations, so it goes on from the context its lost worker had."""
        start = last_start(self._tokens)
        if start is not None:
            self._steps.append(start)
        count = steps_to_drop(self._steps, len(self._tokens), budget)
        if count:
            first, end = self._steps[0], self._steps[count]
            del self._tokens[first:end]
            self._steps = [first, *(boundary - (end - first) for boundary in self._steps[count + 1:])]

    async def _answer_call(self, call: PendingToolCall, *, resumed: bool = False) -> bool:
        """Answer the model's tool call; False if stopped meanwhile."""
        if call.kind == "unavailable":
            self.emit(self.translator.feed_tool_result(None, UNAVAILABLE.format(recipient=call.recipient)))
            return True
        assert call.server_label is not None
        if resumed and not self.is_idempotent(call.server_label, call.name):
            self.emit(self.translator.feed_tool_result(None, INTERRUPTED))
            return True
        return await self._run_tool(call)

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
        # lease_lost or handoff: write nothing more; whoever runs the response next ends it

    def _is_terminal(self) -> bool:
        return self.translator.response.status in TERMINAL_STATUSES

    def _budget(self) -> int:
        return self.sampling.max_tokens - self._generated

    def _note(self, *step: Any) -> None:
        if self.journal is not None:
            self.journal(list(step))

    def _begin_turn(self) -> None:
        self._turn += 1
        self._input_tokens += len(self._tokens)

    def _take_tokens(self, token_ids: Sequence[int]) -> list[ResponseStreamEvent]:
        self._generated += len(token_ids)
        self._tokens += token_ids
        return self.translator.feed(token_ids)

    async def _generate(self) -> TurnResult:
        if self._stopped.is_set():
            return TurnResult("abort")
        counted = not self._continuing
        self._continuing = False
        if counted and not self._forced_turn:
            self._note("engine_call")
            self._begin_turn()
        else:  # a taken-over turn, or the turn a forced call began (already counted)
            self._note("resume_call")
        self._forced_turn = False
        self._request_id = f"{self.response_id}:{self._turn}:{uuid.uuid4().hex[:8]}"
        sampling = replace(self.sampling, max_tokens=self._budget())
        generated_before = self._generated
        try:
            return await self._stream(list(self._tokens), sampling, counted)
        finally:
            self._request_id = None
            # Counted once per engine call, never per token (the per-token path is measured: bench/worker.py).
            self._count_tokens(self._generated - generated_before)

    def _count_tokens(self, generated: int) -> None:
        if generated > 0:
            OUTPUT_TOKENS.labels(self.translator.response.model).inc(generated)

    def _first_token(self) -> None:
        """Once per response: from its creation (the API accepted it) to now."""
        self._first_token_seen = True
        response = self.translator.response
        TIME_TO_FIRST_TOKEN.labels(response.model).observe(max(0.0, time.time() - response.created_at))

    async def _stream(self, tokens: list[int], sampling: SamplingSettings, counted: bool) -> TurnResult:
        turn = _Turn(counted=counted, first_pending=not self._first_token_seen)
        await stream_outputs(self.engine, self._request_id or "", tokens, sampling, partial(self._take_output, turn))
        return turn.result

    def _take_output(self, turn: _Turn, output: EngineOutput) -> None:
        """One engine output. The vLLM engine calls it from its output handler, which serves every
        running response: it must not wait on anything."""
        result = turn.result
        if output.cached_tokens is not None and result.cached_tokens is None and turn.counted:
            result.cached_tokens = output.cached_tokens
            self._note("cached", output.cached_tokens)
            self._cached_tokens += output.cached_tokens
        if output.token_ids:
            if turn.first_pending:  # a local test per output: no metric call per token
                turn.first_pending = False
                self._first_token()
            self.emit(self._take_tokens(output.token_ids))
        if output.finished:
            result.reason = output.finish_reason or "stop"
        elif self.translator.halted and not turn.aborted:  # invalid harmony: stop generating
            turn.aborted = True
            self._abort_request()

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
        idempotent = self.is_idempotent(call.server_label, call.name)
        running = self.tools.call(call.server_label, call.name, call.arguments, idempotent=idempotent)
        task = asyncio.ensure_future(running)
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
