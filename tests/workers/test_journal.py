"""A journal replayed through a fresh translator rebuilds the run exactly, wherever the run was cut.

Pure in-process runs (scripted engine, a list for the event log); see ``support/replay.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai_harmony import HarmonyEncoding
from support.engines import RecordingEngine
from support.replay import CALC, Run, cuts, wire

from oss_responses.engine.base import SamplingSettings
from oss_responses.engine.scripted import ScriptedEngine
from oss_responses.vocab import load_encoding
from oss_responses.workers.generation import INTERRUPTED

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def encoding() -> HarmonyEncoding:
    return load_encoding(REPO / "var" / "tiktoken")


def test_replayed_journal_reproduces_text_run_wherever_cut(encoding: HarmonyEncoding) -> None:
    events, steps = Run(encoding, "tokens 12").uninterrupted()
    assert any(step[0] == "feed" for step in steps)
    for cut in cuts(steps):
        assert wire(Run(encoding, "tokens 12").taken_over(steps[:cut])) == wire(events), f"cut at step {cut}"


def test_replayed_journal_reproduces_tool_run_wherever_cut(encoding: HarmonyEncoding) -> None:
    text = 'call calc.add {"a": 1, "b": 2}'
    events, steps = Run(encoding, text, [CALC], idempotent=True).uninterrupted()
    assert any(step[0] == "feed_tool_result" for step in steps)
    for cut in cuts(steps):
        assert wire(Run(encoding, text, [CALC], idempotent=True).taken_over(steps[:cut])) == wire(events), cut


def _clear_seal(messages: list[dict[str, Any]]) -> str:
    """A seal that seals alike every time (Fernet's does not), so that replayed events compare equal."""
    return json.dumps(messages)


# Answered, then reasoning carries it; answered as the budget ends; cut inside the call.
@pytest.mark.parametrize("max_tokens", [1_000, 40, 36])
def test_replayed_journal_reproduces_sealed_unoffered_call_wherever_cut(encoding: HarmonyEncoding,
                                                                        max_tokens: int) -> None:
    text = 'call nowhere.tool {"a": 1}'
    events, steps = Run(encoding, text, seal=_clear_seal, max_tokens=max_tokens).uninterrupted()
    done = [e.item for e in events if e.type == "response.output_item.done"]
    sealed = [json.loads(item.encrypted_content) for item in done if item.type == "reasoning"]
    assert [message.get("recipient") for messages in sealed for message in messages].count("nowhere.tool") == 1
    for cut in cuts(steps):
        run = Run(encoding, text, seal=_clear_seal, max_tokens=max_tokens)
        assert wire(run.taken_over(steps[:cut])) == wire(events), cut


def test_call_in_flight_of_non_idempotent_tool_is_not_run_again(encoding: HarmonyEncoding) -> None:
    text = 'call calc.add {"a": 1, "b": 2}'
    _, steps = Run(encoding, text, [CALC]).uninterrupted()
    in_flight = next(i for i, step in enumerate(steps) if step[0] == "feed_tool_result")
    run = Run(encoding, text, [CALC])
    events = run.taken_over(steps[:in_flight])
    assert run.calculator.calls == 0
    done = [e for e in events if e.type == "response.output_item.done" and e.item.type == "mcp_call"]
    assert done[0].item.error is not None and INTERRUPTED in str(done[0].item.error)
    assert events[-1].type == "response.completed"


LOOP = " ".join(f'call calc.add {{"a": {n}}}' for n in range(1, 5))  # four calls, one after each result


def _loop_run(encoding: HarmonyEncoding, budget: int | None) -> Run:
    run = Run(encoding, LOOP, [CALC], idempotent=True, max_tokens=400,
              engine=RecordingEngine(ScriptedEngine(encoding), encoding), context_budget=budget)
    run.calculator.output = "fact " * 100
    return run


def _prompt_lengths(run: Run) -> list[int]:
    assert isinstance(run.engine, RecordingEngine)
    return [len(prompt) for prompt in run.engine.prompts]


def test_tool_loop_within_context_budget_drops_its_earliest_steps(encoding: HarmonyEncoding) -> None:
    whole = _loop_run(encoding, None)
    whole.uninterrupted()
    lengths = _prompt_lengths(whole)
    budget = lengths[2]  # two results fit, the third must push the first step out
    cut = _loop_run(encoding, budget)
    events, _ = cut.uninterrupted()
    assert max(lengths) > budget >= max(_prompt_lengths(cut))
    assert len(_prompt_lengths(cut)) > 3 and events[-1].type in ("response.completed", "response.incomplete")


def test_replayed_journal_reproduces_cut_tool_loop_wherever_cut(encoding: HarmonyEncoding) -> None:
    whole = _loop_run(encoding, None)
    whole.uninterrupted()
    budget = _prompt_lengths(whole)[2]
    events, steps = _loop_run(encoding, budget).uninterrupted()
    # Where a context changes (each tool result, continuation and engine call) and the step after it.
    turns = [i for i in cuts(steps) if steps[i - 1][0] in ("feed_tool_result", "continuation", "engine_call")]
    for at in sorted({*turns, *(i + 1 for i in turns if i + 1 < len(steps))}):
        assert wire(_loop_run(encoding, budget).taken_over(steps[:at])) == wire(events), f"cut at step {at}"


SPELL = {"type": "function", "name": "spell", "parameters": {"type": "object"}}
WEB_SEARCH = {"type": "web_search"}
CODE_INTERPRETER = {"type": "code_interpreter", "container": {"type": "auto"}}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "spell"}])
def test_replayed_journal_reproduces_forced_call_wherever_cut(encoding: HarmonyEncoding, choice: object) -> None:
    text = 'call functions.spell {"word": "harmony"}'
    events, steps = Run(encoding, text, [SPELL], tool_choice=choice).uninterrupted()
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(item.type, item.name, item.arguments) for item in done] == [
        ("function_call", "spell", '{"word": "harmony"}')]
    for cut in cuts(steps):
        assert wire(Run(encoding, text, [SPELL], tool_choice=choice).taken_over(steps[:cut])) == wire(events), cut


@pytest.mark.parametrize("choice", [{"type": "mcp", "server_label": "calc"},
                                    {"type": "mcp", "server_label": "calc", "name": "add"}])
def test_replayed_journal_reproduces_forced_mcp_call_wherever_cut(encoding: HarmonyEncoding, choice: object) -> None:
    text = 'call calc.add {"a": 1, "b": 2}'
    events, steps = Run(encoding, text, [CALC], idempotent=True, tool_choice=choice).uninterrupted()
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(item.type, item.name) for item in done if item.type == "mcp_call"] == [("mcp_call", "add")]
    for cut in cuts(steps):
        run = Run(encoding, text, [CALC], idempotent=True, tool_choice=choice)
        assert wire(run.taken_over(steps[:cut])) == wire(events), cut


@pytest.mark.parametrize(("text", "tool", "kind"), [
    ('call browser.search {"query": "harmony"}', WEB_SEARCH, "web_search_call"),
    ("call python 123*456", CODE_INTERPRETER, "code_interpreter_call"),
])
def test_replayed_journal_reproduces_hosted_tool_call_wherever_cut(
        encoding: HarmonyEncoding, text: str, tool: dict[str, Any], kind: str) -> None:
    events, steps = Run(encoding, text, [tool], idempotent=True).uninterrupted()
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(item.type, item.status) for item in done if item.type == kind] == [(kind, "completed")]
    for cut in cuts(steps):
        assert wire(Run(encoding, text, [tool], idempotent=True).taken_over(steps[:cut])) == wire(events), cut


class BudgetCheckingEngine(ScriptedEngine):
    """Refuses a request with no tokens to generate, as vLLM's SamplingParams does."""

    def generate(self, request_id: str, prompt_token_ids: Any, sampling: SamplingSettings) -> Any:
        if sampling.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {sampling.max_tokens}")
        return super().generate(request_id, prompt_token_ids, sampling)


def test_forced_call_longer_than_output_budget_ends_incomplete(encoding: HarmonyEncoding) -> None:
    run = Run(encoding, "hello", [SPELL], tool_choice={"type": "function", "name": "spell"}, max_tokens=3,
              engine=BudgetCheckingEngine(encoding))
    events, _ = run.uninterrupted()
    assert events[-1].type == "response.incomplete"
