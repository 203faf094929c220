"""The golden transcripts, run end to end through a ResponseTranslator.

A golden transcript is harmony text (``golden/NAME.harmony``) encoded with ``allowed_special="all"``.
A scenario is one or more transcripts (one per engine call) with the tool results fed between them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from openai.types.responses import Response
from openai_harmony import HarmonyEncoding
from pydantic import BaseModel

from oss_responses.harmony.translator import ResponseTranslator, opening_events
from support import REPO

GOLDEN = REPO / "tests" / "harmony" / "golden"
MCP_LABELS = {"python": "code_interpreter", "calc": "calc"}

Chunker = Callable[[list[int]], list[list[int]]]


@dataclass(frozen=True)
class Scenario:
    files: Sequence[str]
    tool_results: Sequence[tuple[str | None, str | None]] = ()
    finish: str = "stop"
    background: bool = False


SCENARIOS = {
    "mcp_code_interpreter": Scenario(
        ("mcp_code_interpreter.1", "mcp_code_interpreter.2"), tool_results=(("56088\n", None),), background=True
    ),
    "function_call": Scenario(("function_call",)),
    "reasoning_final": Scenario(("reasoning_final",)),
    "preamble": Scenario(("preamble",)),
    "max_output_tokens": Scenario(("max_output_tokens",), finish="length"),
    "invalid": Scenario(("invalid",)),
    "no_tools": Scenario(("no_tools",)),
}


@dataclass
class Run:
    events: list[BaseModel]
    translator: ResponseTranslator
    continuations: list[list[int]] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)  # every token the model generated, fed in order


def one_token_chunks(tokens: list[int]) -> list[list[int]]:
    return [[token] for token in tokens]


def make_response(background: bool = False) -> Response:
    return Response.model_validate(
        {
            "id": "resp_test",
            "object": "response",
            "created_at": time.time(),
            "model": "gpt-oss-20b",
            "output": [],
            "tool_choice": "auto",
            "tools": [],
            "parallel_tool_calls": True,
            "status": "queued" if background else "in_progress",
            "background": background,
        }
    )


def golden_tokens(encoding: HarmonyEncoding, name: str) -> list[int]:
    return encoding.encode((GOLDEN / f"{name}.harmony").read_text(), allowed_special="all")


def run_scenario(encoding: HarmonyEncoding, scenario: Scenario, chunker: Chunker = one_token_chunks) -> Run:
    response = make_response(scenario.background)
    events = opening_events(response)
    translator = ResponseTranslator(
        response, encoding=encoding, first_sequence_number=len(events), mcp_labels=MCP_LABELS, input_tokens=50
    )
    run = Run(events, translator)
    events += translator.start()
    for index, name in enumerate(scenario.files):
        for chunk in chunker(golden_tokens(encoding, name)):
            events += translator.feed(chunk)
            run.generated += chunk
        if index < len(scenario.tool_results):
            events += translator.feed_tool_result(*scenario.tool_results[index])
            run.continuations.append(translator.continuation_token_ids())
    events += translator.finish(scenario.finish, cached_tokens=10)  # type: ignore[arg-type]
    return run

