"""The worker's budget for compiling a request's grammars (engine/grammar.py), on xgrammar with o200k's
vocabulary: what compiles in time is admitted, what does not is refused and its child killed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import psutil
import pytest
from support import TIKTOKEN_DIR

from oss_responses.engine.base import SchemaNotConstrainable
from oss_responses.engine.grammar import Grammar, GrammarBudget, grammars_of
from oss_responses.engine.response_format import STRICT_CALLS_KEY, STRUCTURED_OUTPUT_KEY

VOCAB_SIZE = 201088
SMALL = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"],
         "additionalProperties": False}
# 3-4 s on one core: far above the budget below, far below what a test can wait for.
SLOW = {"type": "object", "properties": {"s": {"type": "string", "minLength": 2000}}, "required": ["s"]}


def answer(schema: object) -> dict[str, object]:
    return {STRUCTURED_OUTPUT_KEY: {"type": "json_schema", "schema": schema}}


@pytest.fixture(scope="module")
def budget() -> Iterator[GrammarBudget]:
    grammars = GrammarBudget(TIKTOKEN_DIR, VOCAB_SIZE, seconds=1.0)
    yield grammars
    grammars.close()


def test_grammars_of_lists_the_answer_and_every_strict_function() -> None:
    extra = {STRUCTURED_OUTPUT_KEY: {"type": "json_object"}, STRICT_CALLS_KEY: {"functions.pick": SMALL}}

    assert list(grammars_of(extra)) == [Grammar({"type": "object"}, True, "The schema of text.format"),
                                        Grammar(SMALL, False, "The parameters of function 'pick'", "functions.pick")]


def test_admit_passes_schema_that_compiles_in_time(budget: GrammarBudget) -> None:
    extra = answer(SMALL) | {STRICT_CALLS_KEY: {"functions.pick": SMALL}}

    assert asyncio.run(budget.admit(extra)) == extra


def test_admit_leaves_out_a_strict_function_the_grammar_cannot_express(budget: GrammarBudget) -> None:
    """Its calls run unconstrained, as the engine ran them when it could not compile them."""
    extra = {STRICT_CALLS_KEY: {"functions.pick": SMALL, "functions.odd": {"type": "tuple"}}}

    assert asyncio.run(budget.admit(extra)) == {STRICT_CALLS_KEY: {"functions.pick": SMALL}}


def test_admit_refuses_schema_the_grammar_cannot_express(budget: GrammarBudget) -> None:
    with pytest.raises(SchemaNotConstrainable, match="^The schema of text.format cannot be used for constrained"):
        asyncio.run(budget.admit(answer({"type": "tuple"})))


def test_admit_refuses_schema_that_compiles_longer_than_its_budget(budget: GrammarBudget) -> None:
    asyncio.run(budget.admit(answer(SMALL | {"title": "warm"})))  # a child started, outside the timing
    started = time.monotonic()

    with pytest.raises(SchemaNotConstrainable, match="did not compile within 1 s"):
        asyncio.run(budget.admit({STRICT_CALLS_KEY: {"functions.fill": SLOW}}))

    assert time.monotonic() - started < 2.5


def test_admit_remembers_a_refusal_without_compiling_again(budget: GrammarBudget) -> None:
    with pytest.raises(SchemaNotConstrainable):
        asyncio.run(budget.admit(answer(SLOW)))
    started = time.monotonic()

    with pytest.raises(SchemaNotConstrainable, match="did not compile within 1 s"):
        asyncio.run(budget.admit(answer(SLOW)))

    assert time.monotonic() - started < 0.1


def test_admit_after_a_refusal_compiles_in_a_new_child(budget: GrammarBudget) -> None:
    with pytest.raises(SchemaNotConstrainable):
        asyncio.run(budget.admit(answer(SLOW | {"title": "another"})))

    asyncio.run(budget.admit(answer(SMALL | {"title": "new"})))


def test_admit_after_its_child_died_checks_in_a_new_one() -> None:
    """Its child OOM-killed, say. A budget of its own: the test kills only the child it saw start (the test
    process has other children: Redis, PostgreSQL, multiprocessing's servers)."""
    before = {child.pid for child in psutil.Process().children()}
    grammars = GrammarBudget(TIKTOKEN_DIR, VOCAB_SIZE, seconds=1.0)
    try:
        asyncio.run(grammars.admit(answer(SMALL | {"title": "before"})))
        started = [child for child in psutil.Process().children() if child.pid not in before
                   and "resource_tracker" not in " ".join(child.cmdline())]
        assert len(started) == 1
        started[0].kill()
        started[0].wait(10)

        asyncio.run(grammars.admit(answer(SMALL | {"title": "after"})))
    finally:
        grammars.close()
