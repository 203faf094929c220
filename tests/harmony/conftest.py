"""Fixtures for the translation core: the real encoding and every golden scenario's run."""

from __future__ import annotations

import pytest
from openai_harmony import HarmonyEncoding
from support import TIKTOKEN_DIR
from support.harmony_transcripts import SCENARIOS, Run, run_scenario

from oss_responses.vocab import load_encoding


@pytest.fixture(scope="session")
def encoding() -> HarmonyEncoding:
    return load_encoding(TIKTOKEN_DIR)


@pytest.fixture(params=sorted(SCENARIOS))
def scenario_run(request: pytest.FixtureRequest, encoding: HarmonyEncoding) -> Run:
    return run_scenario(encoding, SCENARIOS[request.param])
