"""A running response's journal: what another worker needs to take it over exactly where it stopped.

The translator is pure and deterministic (item ids are seeded by the response id), so the same calls
with the same arguments give the same events, sequence numbers and ids. The journal records those
calls as they happen, each one before the events it produced (``EventWriter`` sends a flush's journal
steps first), together with the generation's own bookkeeping (an engine call began, cached tokens):

    ["begin", first_sequence_number]      the worker's first event number (after the API's opening)
    ["start"]  ["use_prompt", labels, input_tokens, namespaces]
    ["list_tools_started", label]  ["list_tools_completed", label, specs]  ["list_tools_failed", label, msg]
    ["open_approved_call"]  ["decline_call"]          (the answer is the job's own input)
    ["feed", token_ids]                               one per engine output: chunk boundaries kept,
                                                      as the translator coalesces deltas per chunk
    ["feed_tool_result", output, error]  ["continuation"]
    ["finish", reason, cached, input, completed_at]  ["fail", message, code]
    ["engine_call"]  ["resume_call"] (continuing a cut turn: no new input)  ["cached", n]

Replaying the steps through a fresh translator rebuilds its state and the generation's context
(prompt + generated tokens + tool messages); the events it yields that the stream already holds are
dropped, the rest are written, and generation goes on from there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from openai.types.responses import ResponseStreamEvent
from redis.asyncio import Redis

from oss_responses import redis_keys
from oss_responses.harmony.history import ApprovalAnswer
from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.harmony.translator import ResponseTranslator
from oss_responses.statuses import FinishReason

Step = list[Any]
Record = Callable[[Step], None]


class JournalError(RuntimeError):
    """The journal cannot be replayed (an unknown step, or one the translator refuses)."""


class JournaledTranslator(ResponseTranslator):
    """A translator that records every state-changing call (``record``) before it runs it.

    ``record`` is None while a journal is being replayed into it.
    """

    record: Record | None = None

    def _note(self, *step: Any) -> None:
        if self.record is not None:
            self.record(list(step))

    def start(self) -> list[ResponseStreamEvent]:
        self._note("start")
        return super().start()

    def use_prompt(
        self, *, mcp_labels: Mapping[str, str], input_tokens: int, function_namespaces: frozenset[str] = frozenset()
    ) -> None:
        self._note("use_prompt", dict(mcp_labels), input_tokens, sorted(function_namespaces))
        super().use_prompt(mcp_labels=mcp_labels, input_tokens=input_tokens, function_namespaces=function_namespaces)

    def list_tools_started(self, server_label: str) -> list[ResponseStreamEvent]:
        self._note("list_tools_started", server_label)
        return super().list_tools_started(server_label)

    def list_tools_completed(self, server_label: str, tools: Sequence[Any]) -> list[ResponseStreamEvent]:
        self._note("list_tools_completed", server_label, [asdict(tool) for tool in tools])
        return super().list_tools_completed(server_label, tools)

    def list_tools_failed(self, server_label: str, message: str) -> list[ResponseStreamEvent]:
        self._note("list_tools_failed", server_label, message)
        return super().list_tools_failed(server_label, message)

    def open_approved_call(self, answer: ApprovalAnswer) -> list[ResponseStreamEvent]:
        self._note("open_approved_call")
        return super().open_approved_call(answer)

    def decline_call(self, answer: ApprovalAnswer) -> list[ResponseStreamEvent]:
        self._note("decline_call")
        return super().decline_call(answer)

    def feed(self, token_ids: Sequence[int]) -> list[ResponseStreamEvent]:
        record = self.record  # once per token: the short way
        if record is not None:
            record(["feed", list(token_ids)])
        return super().feed(token_ids)

    def feed_tool_result(self, output: str | None, error: str | None = None) -> list[ResponseStreamEvent]:
        self._note("feed_tool_result", output, error)
        return super().feed_tool_result(output, error)

    def continuation_token_ids(self) -> list[int]:
        self._note("continuation")
        return super().continuation_token_ids()

    def finish(
        self,
        reason: FinishReason,
        *,
        cached_tokens: int | None = None,
        input_tokens: int | None = None,
        completed_at: int | None = None,
    ) -> list[ResponseStreamEvent]:
        completed_at = int(time.time()) if completed_at is None else completed_at
        self._note("finish", reason, cached_tokens, input_tokens, completed_at)
        return super().finish(reason, cached_tokens=cached_tokens, input_tokens=input_tokens, completed_at=completed_at)

    def fail(self, message: str, code: str = "server_error") -> list[ResponseStreamEvent]:
        self._note("fail", message, code)
        return super().fail(message, code)


async def read_journal(redis: Redis, response_id: str) -> list[Step]:
    """Every step recorded so far, in order."""
    entries = await redis.lrange(redis_keys.journal(response_id), 0, -1)
    return [step for entry in entries for step in json.loads(entry)]


def first_sequence_number(steps: Sequence[Step]) -> int | None:
    return steps[0][1] if steps and steps[0][0] == "begin" else None


def listed_in(steps: Sequence[Step]) -> dict[str, list[McpToolSpec]]:
    """The tool lists the journal holds (what the lost worker listed before it rendered the prompt)."""
    return {step[1]: [McpToolSpec(**spec) for spec in step[2]] for step in steps if step[0] == "list_tools_completed"}


def unfinished_listings(steps: Sequence[Step]) -> set[str]:
    """Labels whose listing the journal opened but never completed or failed (the worker was lost)."""
    opened = {step[1] for step in steps if step[0] == "list_tools_started"}
    return opened - {step[1] for step in steps if step[0] in ("list_tools_completed", "list_tools_failed")}


def split_at_prompt(steps: Sequence[Step]) -> tuple[list[Step], list[Step]]:
    """The steps before the prompt was rendered (start, tool listings) and the rest (from use_prompt)."""
    for index, step in enumerate(steps):
        if step[0] == "use_prompt":
            return list(steps[:index]), list(steps[index:])
    return list(steps), []


def apply_translator_step(
    translator: ResponseTranslator, step: Step, approval: ApprovalAnswer | None
) -> list[ResponseStreamEvent]:
    """Run one recorded translator call again; the events it yields (``feed``/``continuation`` are the caller's)."""
    kind, args = step[0], step[1:]
    if kind == "begin":
        return []
    if kind == "start":
        return translator.start()
    if kind == "use_prompt":
        labels, input_tokens, namespaces = args
        translator.use_prompt(mcp_labels=labels, input_tokens=input_tokens, function_namespaces=frozenset(namespaces))
        return []
    if kind == "list_tools_started":
        return translator.list_tools_started(args[0])
    if kind == "list_tools_completed":
        return translator.list_tools_completed(args[0], [McpToolSpec(**spec) for spec in args[1]])
    if kind == "list_tools_failed":
        return translator.list_tools_failed(args[0], args[1])
    if kind in ("open_approved_call", "decline_call"):
        if approval is None:
            raise JournalError(f"the journal answers an approval the request does not hold ({kind})")
        answer = translator.open_approved_call if kind == "open_approved_call" else translator.decline_call
        return answer(approval)
    if kind == "feed_tool_result":
        return translator.feed_tool_result(args[0], args[1])
    if kind == "finish":
        reason, cached, input_tokens, completed_at = args
        return translator.finish(reason, cached_tokens=cached, input_tokens=input_tokens, completed_at=completed_at)
    if kind == "fail":
        return translator.fail(args[0], args[1])
    raise JournalError(f"unknown journal step {kind!r}")
