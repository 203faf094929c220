"""Structured outputs on vLLM: a v1 logits processor that constrains only the ``final`` message.

vLLM's own structured outputs need a tokenizer (``skip_tokenizer_init`` refuses them: "Structured
outputs requires a tokenizer so it can't be used with 'skip_tokenizer_init'"), and here prompts and
outputs are harmony token ids with no tokenizer. They would also constrain the whole output, while
gpt-oss must think freely on the analysis channel first. So this processor, built on xgrammar (which
vLLM itself uses), leaves a request alone until its output contains a header with
``<|channel|>final`` ending in ``<|message|>``; from there the final message's tokens are fed to a
grammar matcher and every next token is masked to what the grammar allows. Once the grammar is
complete only ``<|return|>`` remains allowed, so the response ends right after the JSON. A request
that continues a message (a takeover or a handoff: prompt + the tokens the lost worker generated)
has that message's start in its prompt: the prompt's open last message is read as the start of the
output, so the header and the JSON begun there count.

A request opts in with ``SamplingParams.extra_args = {"structured_output": SPEC}``, SPEC being
``{"type": "json_schema", "schema": {...}}`` or ``{"type": "json_object"}`` (see
:func:`oss_responses.engine.response_format.structured_output_spec`). The vocabulary (o200k bytes,
special tokens empty) is read once per engine process from ``TIKTOKEN_ENCODINGS_BASE`` (set by the
worker before vLLM starts); grammars are compiled once per schema. JSON is constrained to compact
separators, as the scripted engine writes it, so a forced scripted answer passes the grammar too. This
module imports vLLM; the engine core process loads it by name.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from oss_responses.engine.response_format import STRUCTURED_OUTPUT_KEY
from oss_responses.engine.scripted import CALL, CHANNEL, END, MESSAGE, RETURN, START

if TYPE_CHECKING:
    import xgrammar
    from vllm.config import VllmConfig

log = logging.getLogger(__name__)

_SEPARATORS = (",", ":")


def _spec_of(params: SamplingParams) -> dict[str, Any] | None:
    spec = (params.extra_args or {}).get(STRUCTURED_OUTPUT_KEY)
    if spec is None:
        return None
    if not isinstance(spec, dict) or spec.get("type") not in ("json_schema", "json_object"):
        raise ValueError(f"extra_args[{STRUCTURED_OUTPUT_KEY!r}] must be a json_schema or json_object spec")
    if spec["type"] == "json_schema" and not isinstance(spec.get("schema"), dict):
        raise ValueError(f"extra_args[{STRUCTURED_OUTPUT_KEY!r}] json_schema needs a schema object")
    return spec


def _check_schema(schema: dict[str, Any]) -> None:
    """Refuse (before the request reaches the engine core) a schema xgrammar cannot turn into a grammar."""
    import xgrammar

    try:
        xgrammar.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False, separators=_SEPARATORS)
    except RuntimeError as exc:
        reason = str(exc).rsplit(": ", 1)[-1].strip() if ": " in str(exc) else str(exc).strip()
        raise ValueError(f"text.format.schema cannot be used for constrained decoding: {reason}") from exc


class Grammars:
    """The vocabulary as xgrammar sees it, and compiled grammars by spec."""

    def __init__(self, vocab_size: int) -> None:
        import xgrammar

        from oss_responses.vocab import token_bytes

        vocabulary = token_bytes(_vocab_folder(), vocab_size)
        self.final_token = vocabulary.index(b"final")
        self.info = xgrammar.TokenizerInfo(vocabulary, xgrammar.VocabType.RAW, vocab_size=vocab_size,
                                           stop_token_ids=[RETURN])
        self.compiler = xgrammar.GrammarCompiler(self.info, max_threads=1)
        self._compiled: dict[str, xgrammar.CompiledGrammar] = {}

    def matcher(self, spec: dict[str, Any]) -> xgrammar.GrammarMatcher:
        import xgrammar

        key = json.dumps(spec, sort_keys=True)
        if key not in self._compiled:
            self._compiled[key] = self._compile(spec)
        return xgrammar.GrammarMatcher(self._compiled[key])

    def _compile(self, spec: dict[str, Any]) -> xgrammar.CompiledGrammar:
        schema = spec["schema"] if spec["type"] == "json_schema" else {"type": "object"}
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=_SEPARATORS)


def _vocab_folder() -> Path:
    folder = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    if folder:
        return Path(folder)
    from oss_responses.config import get_settings

    return get_settings().tiktoken_dir


def open_message(prompt: Sequence[int] | None) -> list[int]:
    """The prompt's last message if it is still open (from its ``<|start|>``): the start of the output.

    A prompt for completion ends with ``<|start|>assistant``; a continued one with a header, or a
    message's content, that the lost worker generated."""
    if not prompt:
        return []
    for index in range(len(prompt) - 1, -1, -1):
        if prompt[index] in _MESSAGE_ENDS:
            return []
        if prompt[index] == START:
            return list(prompt[index:])
    return []


_MESSAGE_ENDS = frozenset((END, RETURN, CALL))


@dataclass
class _Constrained:
    """One request: where its final message's content starts, and the matcher fed up to there.

    Positions count over the prompt's open message (``opened``), then the generated tokens."""

    matcher: xgrammar.GrammarMatcher
    generated: list[int]  # vLLM's live list of the request's output tokens
    final_token: int
    opened: list[int] = field(default_factory=list)
    scanned: int = 0
    header_start: int = 0
    content_start: int | None = None
    fed: int = 0
    broken: bool = False

    def advance(self) -> bool:
        """Feed the new tokens; True while the grammar constrains the next token."""
        if self.broken:
            return False
        if self.content_start is None and not self._find_final_content():
            return False
        assert self.content_start is not None
        while self.content_start + self.fed < self._length():
            if not self.matcher.accept_token(self._at(self.content_start + self.fed)):
                # Only a token from elsewhere (another processor's forcing) gets here: stop masking.
                log.warning("structured output: a final-channel token outside the grammar; unconstrained from here")
                self.broken = True
                return False
            self.fed += 1
        return not self.matcher.is_terminated()

    def _length(self) -> int:
        return len(self.opened) + len(self.generated)

    def _at(self, index: int) -> int:
        opened = len(self.opened)
        return self.opened[index] if index < opened else self.generated[index - opened]

    def _find_final_content(self) -> bool:
        while self.scanned < self._length():
            token, index = self._at(self.scanned), self.scanned
            self.scanned += 1
            if token == START:
                self.header_start = self.scanned
            elif token == MESSAGE and self._is_final_header(range(self.header_start, index)):
                self.content_start = self.scanned
                return True
        return False

    def _is_final_header(self, header: range) -> bool:
        return any(self._at(a) == CHANNEL and self._at(a + 1) == self.final_token for a in header[:-1])


# vLLM is optional (OSS_RESPONSES_SKIP_ENGINE=1): without it this base is Any; with it the ignore is unused.
class StructuredFinalLogitsProcessor(LogitsProcessor):  # type: ignore[misc, unused-ignore]
    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        self._vocab_size = vllm_config.model_config.get_vocab_size()
        self._max_rows = vllm_config.scheduler_config.max_num_seqs
        self._grammars: Grammars | None = None
        self._bitmask: torch.Tensor | None = None
        self._by_row: dict[int, _Constrained] = {}

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        spec = _spec_of(sampling_params)
        if spec is not None and spec["type"] == "json_schema":
            _check_schema(spec["schema"])

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self._by_row, batch_update, self._new_request)

    def _new_request(
        self, params: SamplingParams, prompt: list[int] | None, generated: list[int]
    ) -> _Constrained | None:
        spec = _spec_of(params)
        if spec is None:
            return None
        if self._grammars is None:
            import xgrammar

            self._grammars = Grammars(self._vocab_size)
            self._bitmask = xgrammar.allocate_token_bitmask(self._max_rows, self._vocab_size)
        try:
            matcher = self._grammars.matcher(spec)
        except RuntimeError:
            # validate_params refuses such schemas first; never let one take the engine core down.
            log.exception("structured output: the schema did not compile; the request runs unconstrained")
            return None
        return _Constrained(matcher, generated, self._grammars.final_token, open_message(prompt))

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        rows = [row for row, request in self._by_row.items() if request.advance()]
        if not rows:
            return logits
        import xgrammar

        assert self._bitmask is not None
        for row in rows:
            self._by_row[row].matcher.fill_next_token_bitmask(self._bitmask, row)
        xgrammar.apply_token_bitmask_inplace(logits, self._bitmask.to(logits.device), indices=rows,
                                             vocab_size=min(self._vocab_size, logits.shape[-1]))
        return logits
