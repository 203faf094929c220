"""Running one response's generation outside a worker, and taking it over from a cut journal.

The property behind takeovers: replaying any prefix of a run's journal through a fresh translator
yields that run's events so far, and resuming yields the rest, the same events (ids and sequence
numbers included) as the run that was never cut. :class:`Run` drives both on any engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from openai_harmony import HarmonyEncoding

from oss_responses.engine.base import Engine, SamplingSettings
from oss_responses.engine.scripted import ScriptedEngine
from oss_responses.harmony.builtin_tools import DEFAULT_BUILTIN_LABELS
from oss_responses.harmony.lifecycle import placeholder_response
from oss_responses.harmony.mcp_tools import McpToolSpec
from oss_responses.harmony.render import (
    RenderOptions,
    forced_call_header,
    hosted_builtins,
    hosted_calls,
    render_prompt,
)
from oss_responses.requests import parse_create_request
from oss_responses.tools.executor import ToolOutcome
from oss_responses.workers.generation import Generation
from oss_responses.workers.journal import (
    JournaledTranslator,
    apply_translator_step,
    split_at_prompt,
)

RESPONSE_ID = "resp_journal"
CALC = {"type": "mcp", "server_label": "calc", "server_url": "http://calc.invalid/mcp", "require_approval": "never"}
ADD = McpToolSpec("add", "Add two numbers", {"type": "object", "properties": {}})


@dataclass
class EventList:
    """The event writer's surface a Generation uses, kept in a list."""

    events: list[Any] = field(default_factory=list)

    def append(self, response_id: str, events: list[Any]) -> None:
        self.events += events


@dataclass
class Calculator:
    calls: int = 0
    output: str = "3"

    async def call(self, server_label: str, tool: str, arguments: str, *, idempotent: bool = False) -> ToolOutcome:
        self.calls += 1
        return ToolOutcome(output=self.output)


@dataclass
class Run:
    """One response's generation outside a worker: ``drive`` runs a coroutine to its end (on the
    engine's loop), ``engine`` defaults to the scripted engine."""

    encoding: HarmonyEncoding
    text: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    idempotent: bool = False
    tool_choice: Any = "auto"
    max_tokens: int = 1_000
    engine: Engine | None = None
    drive: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run
    log: EventList = field(default_factory=EventList)
    calculator: Calculator = field(default_factory=Calculator)
    replayed: int = 0  # after taken_over: how many of its events the replay gave
    context_budget: int | None = None  # truncation "auto": the most tokens an engine call's prompt may have
    seal: Callable[[list[dict[str, Any]]], str] | None = None  # include reasoning.encrypted_content

    def prompt(self, translator: JournaledTranslator) -> list[int]:
        """Rendered, and its facts given to the translator (as the runner does before generating)."""
        request = self.request()
        options = RenderOptions(conversation_start_date="2026-01-01", mcp_tools={"calc": [ADD]} if self.tools else {})
        rendered = render_prompt(request, [], options, self.encoding)
        translator.use_prompt(mcp_labels=rendered.mcp_labels, input_tokens=len(rendered.token_ids),
                              function_namespaces=rendered.function_namespaces)
        return rendered.token_ids

    def request(self) -> Any:
        return parse_create_request({"model": "m", "input": self.text, "tools": self.tools,
                                     "tool_choice": self.tool_choice})

    def forced(self) -> list[int] | None:
        """The forced start of a call, as the runner gives it to ``Generation.run``."""
        header = forced_call_header(self.request(), DEFAULT_BUILTIN_LABELS)
        return self.encoding.encode(header, allowed_special="all") if header else None

    def generation(self, record: list[Any] | None) -> Generation:
        translator = JournaledTranslator(
            placeholder_response(RESPONSE_ID, "m", 1_700_000_000), encoding=self.encoding, first_sequence_number=2,
            id_seed=RESPONSE_ID, hosted_builtins=hosted_builtins(self.request(), DEFAULT_BUILTIN_LABELS),
            hosted_calls=hosted_calls(self.request()), seal=self.seal,
        )
        translator.record = None if record is None else record.append
        stops = tuple(self.encoding.stop_tokens_for_assistant_actions())
        sampling = SamplingSettings(max_tokens=self.max_tokens, stop_token_ids=stops)
        return Generation(
            RESPONSE_ID, self.engine or ScriptedEngine(self.encoding), self.log, translator, self.calculator, sampling,  # type: ignore[arg-type]
            journal=translator.record, is_idempotent=lambda server, tool: self.idempotent,
            context_budget=self.context_budget,
        )

    def uninterrupted(self) -> tuple[list[Any], list[list[Any]]]:
        steps: list[list[Any]] = []
        generation = self.generation(steps)
        self.log.append(RESPONSE_ID, generation.translator.start())
        self.drive(generation.run(self.prompt(generation.translator), forced=self.forced()))  # type: ignore[arg-type]
        return self.log.events, steps

    def taken_over(self, steps: list[list[Any]]) -> list[Any]:
        """A fresh worker's view: the journal replayed, then resumed; every event of the response."""
        self.log = EventList()
        generation = self.generation(None)
        before, after = split_at_prompt(steps)
        replayed = [e for step in before for e in apply_translator_step(generation.translator, step, None)]
        prompt = self.prompt(generation.translator)  # type: ignore[arg-type]
        replayed += generation.replay(prompt, after, None)
        self.replayed = len(replayed)
        resumed: list[Any] = []
        generation.translator.record = resumed.append  # type: ignore[attr-defined]
        forced = self.forced()
        self.drive(generation.resume(forced=forced) if after else generation.run(prompt, forced=forced))
        return replayed + self.log.events


def wire(events: list[Any]) -> list[dict[str, Any]]:
    """Events as JSON, without ``completed_at`` (a resumed run completes later)."""
    dumped = [event.model_dump(mode="json") for event in events]
    for event in dumped:
        if "response" in event:
            event["response"].pop("completed_at", None)
    return dumped


def cuts(steps: list[list[Any]]) -> list[int]:
    """Every point of the journal a worker could have stopped at, from the first engine output on."""
    return [index for index in range(len(steps)) if index > 0 and steps[index - 1][0] != "begin"]
