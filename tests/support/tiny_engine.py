"""The tiny random-weight gpt-oss model, its engine settings, and a loop thread like the worker's."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

from oss_responses.config import Settings
from oss_responses.engine.vllm import FORCED_LOGITS_PROCESSOR

T = TypeVar("T")

MAX_MODEL_LEN = 2048
# vLLM's engine arguments for every test engine. On the CPU, vLLM otherwise sizes its KV cache from
# gpu_memory_utilization x the machine's memory and touches all of it: 7 GiB resident per engine on a
# 24 GiB machine (CI's), where the process running the engine tests holds two at once (test_frontends'
# groups) and keeps the session's engine until the run ends. The tiny model's KV is ~1 KB per token:
# 128 MiB holds ~125k tokens, 60 of MAX_MODEL_LEN. An explicit size with eager mode also skips the
# start's warm-up pass, which only served the automatic sizing.
TEST_ENGINE_ARGS = {"enforce_eager": True, "kv_cache_memory_bytes": 128 * 2**20}


class EngineLoop:
    """An asyncio loop in its own thread, like the worker's engine loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="engine-loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Awaitable[T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def run(self, coro: Awaitable[T], timeout: float = 60.0) -> T:
        return self.submit(coro).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def build_tiny_gpt_oss(directory: Path) -> Path:
    """A 26M-parameter gpt-oss with random weights and the real vocabulary size (about 6 s)."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    torch.manual_seed(0)
    config = GptOssConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,  # vLLM's CPU attention rejects small head sizes such as 16
        vocab_size=201088,
        intermediate_size=64,
        sliding_window=128,
        max_position_embeddings=4096,
        layer_types=["sliding_attention", "full_attention"],
        eos_token_id=200002,
        pad_token_id=199999,
        bos_token_id=199998,
        tie_word_embeddings=False,
    )
    GptOssForCausalLM(config).to(torch.bfloat16).save_pretrained(directory)
    return directory



def tiny_settings(model: Path) -> Settings:
    return Settings(
        vllm_model=str(model),
        vllm_dtype="bfloat16",
        vllm_max_model_len=MAX_MODEL_LEN,
        worker_concurrency=8,
        vllm_engine_args={**TEST_ENGINE_ARGS, "logits_processors": [FORCED_LOGITS_PROCESSOR]},
    )
