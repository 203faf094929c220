"""The worker's vLLM runs Model Runner V1, whose logits-processor interface its processors implement.

vLLM 0.32 picks Model Runner V2 wherever Triton is installed: every CUDA host, not this CPU build. The
tests take Triton as present (vLLM's own ``HAS_TRITON``) to see the choice a GPU host would make, on the
configuration the worker builds (no engine is started: the choice is made from the config alone).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.environ import environment_restored
from support.tiny_engine import EngineLoop, tiny_settings

from oss_responses.engine import frontends
from oss_responses.engine.model_runner import (
    TESTED_VLLM,
    V2_RUNNER_VARIABLE,
    ModelRunnerUnsupported,
    keep_v1_model_runner,
)
from oss_responses.engine.vllm import VllmEngine, engine_args

pytestmark = pytest.mark.engine


class _Built(Exception):
    """Raised where vLLM would build the engine: the test has seen what it needed."""


@pytest.fixture
def gpu_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Triton installed, as on a CUDA host; the variable unset; the environment restored afterwards."""
    import vllm.config.vllm

    monkeypatch.setattr(vllm.config.vllm, "HAS_TRITON", True)
    with environment_restored():
        monkeypatch.delenv(V2_RUNNER_VARIABLE, raising=False)
        yield


def _config(tiny_model: Path) -> Any:
    from vllm.usage.usage_lib import UsageContext

    return engine_args(tiny_settings(tiny_model)).create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)


@pytest.mark.usefixtures("gpu_host")
def test_vllm_on_gpu_host_runs_v2_model_runner_which_refuses_worker_logits_processors(tiny_model: Path) -> None:
    from vllm.v1.worker.gpu.sample.logits_processor import build_custom_logits_processors_params_validator

    config = _config(tiny_model)

    assert config.use_v2_model_runner
    with pytest.raises(ValueError, match="is not a subclass of vllm.v1.worker.gpu.sample.logits_processor"):
        build_custom_logits_processors_params_validator(config.model_config.logits_processors)


@pytest.mark.usefixtures("gpu_host")
def test_keep_v1_model_runner_makes_vllm_on_gpu_host_run_v1_with_worker_logits_processors(tiny_model: Path) -> None:
    from vllm.v1.sample.logits_processor import validate_logits_processors_parameters

    keep_v1_model_runner()
    config = _config(tiny_model)

    assert not config.use_v2_model_runner
    validate_logits_processors_parameters(config.model_config.logits_processors, _sampling())


def _sampling() -> Any:
    from vllm import SamplingParams

    return SamplingParams(max_tokens=1)


@pytest.mark.usefixtures("gpu_host")
def test_start_engine_asks_vllm_for_v1_model_runner_before_building_it(
    tiny_model: Path, engine_loop: EngineLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.v1.engine.async_llm import AsyncLLM

    seen = {}

    def from_engine_args(args: Any, *_: Any, **__: Any) -> None:
        seen["v2"] = args.create_engine_config().use_v2_model_runner
        raise _Built

    monkeypatch.setattr(AsyncLLM, "from_engine_args", from_engine_args)
    with pytest.raises(_Built):
        engine_loop.run(VllmEngine(tiny_settings(tiny_model)).start())

    assert seen == {"v2": False}


@pytest.mark.usefixtures("gpu_host")
def test_serve_frontends_asks_vllm_for_v1_model_runner_before_starting_engine_core(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vllm.v1.engine.utils

    seen = {}

    def bind_engine_zmq_listeners(config: Any, count: int) -> None:
        seen["v2"] = config.use_v2_model_runner
        raise _Built

    monkeypatch.setattr(vllm.v1.engine.utils, "bind_engine_zmq_listeners", bind_engine_zmq_listeners)
    settings = tiny_settings(tiny_model).model_copy(update={"vllm_frontends": 2})
    with pytest.raises(_Built):
        frontends.serve_frontends(settings, lambda frontend: None)

    assert seen == {"v2": False}


@pytest.mark.usefixtures("gpu_host")
@pytest.mark.parametrize("value", ["1", "true"])
def test_keep_v1_model_runner_refuses_variable_asking_for_v2(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(V2_RUNNER_VARIABLE, value)

    with pytest.raises(ModelRunnerUnsupported, match=f"{V2_RUNNER_VARIABLE}={value}: .*Model Runner V1 only"):
        keep_v1_model_runner()


@pytest.mark.usefixtures("gpu_host")
def test_keep_v1_model_runner_refuses_vllm_without_v1(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.config import VllmConfig

    monkeypatch.delattr(VllmConfig, "use_v2_model_runner")  # as vLLM 0.34 is: V2 alone

    with pytest.raises(ModelRunnerUnsupported, match=rf"runs Model Runner V2 only.*install vllm=={TESTED_VLLM}"):
        keep_v1_model_runner()

