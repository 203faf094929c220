"""Fixtures for the translation core: the real encoding and every golden scenario's run."""

from __future__ import annotations

import sys
from pathlib import Path

# The transcript helpers sit beside these tests; importlib import mode does not put this folder on sys.path.
sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402
from harmony_transcripts import REPO, SCENARIOS, Run, run_scenario
from openai_harmony import HarmonyEncoding

from oss_responses.vocab import load_encoding


@pytest.fixture(scope="session")
def encoding() -> HarmonyEncoding:
    return load_encoding(REPO / "var" / "tiktoken")


@pytest.fixture(params=sorted(SCENARIOS))
def scenario_run(request: pytest.FixtureRequest, encoding: HarmonyEncoding) -> Run:
    return run_scenario(encoding, SCENARIOS[request.param])
