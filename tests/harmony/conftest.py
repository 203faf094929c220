"""Fixtures for the translation core: the real encoding and every golden scenario's run.

The property tests (hypothesis) draw the same examples on every run, as ``tests/api/test_fuzz.py`` does: the
suite is to pass or fail on the code, not on the draw; ``FUZZ_RANDOM=1`` draws afresh."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from openai_harmony import HarmonyEncoding
from support import TIKTOKEN_DIR
from support.harmony_transcripts import SCENARIOS, Run, run_scenario

from oss_responses.vocab import load_encoding

settings.register_profile("suite", derandomize="FUZZ_RANDOM" not in os.environ, database=None)
settings.load_profile("suite")


@pytest.fixture(scope="session")
def encoding() -> HarmonyEncoding:
    return load_encoding(TIKTOKEN_DIR)


@pytest.fixture(params=sorted(SCENARIOS))
def scenario_run(request: pytest.FixtureRequest, encoding: HarmonyEncoding) -> Run:
    return run_scenario(encoding, SCENARIOS[request.param])
