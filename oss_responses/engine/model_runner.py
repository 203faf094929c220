"""Which of vLLM's model runners the worker's engine runs: V1, the one its logits processors are written for.

The worker's logits processors (``engine/structured.py``: structured outputs, strict function arguments,
``tool_choice``'s names; ``engine/forced.py``: scripted forcing) implement the interface of vLLM's Model
Runner V1 (``vllm.v1.sample.logits_processor.LogitsProcessor``). vLLM 0.32 runs Model Runner V2 wherever
Triton is installed, which is every CUDA host (its CUDA image ships Triton), and V2's validator refuses
V1 processors when ``AsyncLLM`` starts: "StructuredFinalLogitsProcessor is not a subclass of
vllm.v1.worker.gpu.sample.logits_processor.LogitsProcessor". On this CPU build (no Triton) vLLM picks V1
by itself, so the test suite never saw it; ``tests/engine/test_model_runner.py`` shows both with
Triton taken as present.

So the worker sets ``VLLM_USE_V2_MODEL_RUNNER=0`` before vLLM reads its configuration: in its own process,
and, inherited, in the engine core processes vLLM starts from it. vLLM 0.34 removed V1 (and the variable):
there the worker refuses to start, naming the vLLM it runs on.
"""

from __future__ import annotations

import os

V2_RUNNER_VARIABLE = "VLLM_USE_V2_MODEL_RUNNER"
TESTED_VLLM = "0.32.0"


class ModelRunnerUnsupported(ValueError):
    """vLLM would run Model Runner V2, whose logits-processor interface the worker does not implement."""


def keep_v1_model_runner() -> None:
    """Have vLLM run Model Runner V1 in this process and the engine cores it starts (call before vLLM
    builds its config). Raises :class:`ModelRunnerUnsupported` where it would not: the variable set to
    ask for V2, or a vLLM without V1."""
    asked = os.environ.get(V2_RUNNER_VARIABLE)
    if asked is not None and asked.strip() != "0":
        raise ModelRunnerUnsupported(
            f"{V2_RUNNER_VARIABLE}={asked}: the worker's logits processors (structured outputs, tool_choice, strict "
            f"functions) run on vLLM's Model Runner V1 only; unset {V2_RUNNER_VARIABLE} (the worker sets it to 0)"
        )
    from vllm.config import VllmConfig

    if not hasattr(VllmConfig, "use_v2_model_runner"):  # vLLM 0.34 and later: V2 alone
        import vllm

        raise ModelRunnerUnsupported(
            f"vLLM {vllm.__version__} runs Model Runner V2 only, whose logits-processor interface the worker's "
            f"processors (structured outputs, tool_choice, strict functions) do not implement; install "
            f"vllm=={TESTED_VLLM}"
        )
    os.environ[V2_RUNNER_VARIABLE] = "0"
