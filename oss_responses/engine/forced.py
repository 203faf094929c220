"""A vLLM v1 logits processor that forces a scripted token sequence (tests and demos).

A request whose ``SamplingParams.extra_args`` carries ``{"forced_token_ids": [...]}`` can only
sample the script's next token: every other logit is set to -inf, so any temperature, top_p or
seed yields the script. Past the end of the script the request samples freely. Requests without a
script are untouched.

Random-weight test models emit random tokens, which are not valid harmony; this is how the tests
drive valid harmony through the real engine. Register it only where wanted, through the engine
arguments: ``{"logits_processors": [FORCED_LOGITS_PROCESSOR]}`` (named, with the script's key, in
:mod:`oss_responses.engine.vllm`, which does not import vLLM). This module imports vLLM; the
engine core process loads it by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from oss_responses.engine.vllm import FORCED_TOKENS_KEY

if TYPE_CHECKING:
    from vllm.config import VllmConfig


# (script, the request's live list of generated token ids)
_Forcing = tuple[Sequence[int], list[int]]


def forced_script(params: SamplingParams) -> list[int] | None:
    script = (params.extra_args or {}).get(FORCED_TOKENS_KEY)
    if script is None:
        return None
    if not isinstance(script, list) or not all(isinstance(t, int) and t >= 0 for t in script):
        raise ValueError(f"extra_args[{FORCED_TOKENS_KEY!r}] must be a list of token ids")
    return script


# vLLM is optional (OSS_RESPONSES_SKIP_ENGINE=1): without it this base is Any; with it the ignore is unused.
class ForcedTokensLogitsProcessor(LogitsProcessor):  # type: ignore[misc, unused-ignore]
    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        self._by_row: dict[int, _Forcing] = {}

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        forced_script(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self._by_row, batch_update, _new_forcing)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for row, (script, generated) in self._by_row.items():
            step = len(generated)
            if step < len(script):
                token = script[step]
                kept = logits[row, token].clone()
                logits[row].fill_(float("-inf"))
                logits[row, token] = kept if torch.isfinite(kept) else 0.0
        return logits


def _new_forcing(params: SamplingParams, _prompt: list[int] | None, generated: list[int]) -> _Forcing | None:
    script = forced_script(params)
    return None if script is None else (script, generated)
