"""Structured outputs on vLLM: a v1 logits processor that constrains a ``final`` message to the
response's JSON schema, and a strict function's call to its parameters' schema.

vLLM's own structured outputs need a tokenizer (``skip_tokenizer_init`` refuses them: "Structured
outputs requires a tokenizer so it can't be used with 'skip_tokenizer_init'"), and here prompts and
outputs are harmony token ids with no tokenizer. They would also constrain the whole output, while
gpt-oss must think freely on the analysis channel first. So this processor, built on xgrammar (which
vLLM itself uses), leaves a request alone until its output holds a header ending in ``<|message|>``
whose message is constrained: ``<|channel|>final`` when the request has a response format, or a
recipient (``to=functions.NAME``) that is one of its strict functions. From there the message's
tokens are fed to a grammar matcher and every next token is masked to what the grammar allows. Once
the grammar is complete only the message's end remains allowed (``<|return|>`` after the answer,
``<|call|>`` after the arguments), so the engine call ends right after the JSON. A request that
continues a message (a takeover or a handoff: prompt + the tokens the lost worker generated, or a
call whose header the worker wrote for ``tool_choice``) has that message's start in its prompt: the
prompt's open last message is read as the start of the output, so the header and the JSON begun
there count. Under ``tool_choice: "required"`` the worker writes a call's header up to its namespace
(``to=functions.``) and the model names the function: the name is masked, token by token, to finish
the header as one of the functions shown does (``{"required_call": {"after": [...], "rests": [...]}}``).
Tokens a forced script (``engine/forced.py``) dictates are fed, never masked.

A request opts in with ``SamplingParams.extra_args``: ``{"structured_output": SPEC}``, SPEC being
``{"type": "json_schema", "schema": {...}}`` or ``{"type": "json_object"}`` (see
:func:`oss_responses.engine.response_format.structured_output_spec`), and ``{"strict_calls":
{recipient: parameters schema}}`` (:func:`oss_responses.harmony.render.strict_functions`). The
vocabulary (o200k bytes, special tokens empty) is read once per engine process from
``TIKTOKEN_ENCODINGS_BASE`` (set by the worker before vLLM starts); a request's grammars (its answer's,
every strict function's) start compiling in threads when it joins the batch, never in the engine's
step, once per schema, the most recent 256 kept (``engine/grammar.py``, which also says how the worker
bounds their cost). A request whose prompt opens a constrained message needs its grammar in its first
step: the worker has it compiled first, through :class:`GrammarsWorkerExtension`. An answer is
constrained to compact separators, as the scripted engine writes it, so a forced scripted answer passes
the grammar too; arguments allow one whitespace character wherever JSON allows some, as models write them.
This module imports vLLM; the engine core process loads it by name.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from oss_responses.engine.grammar import SEPARATORS, compile_grammar, grammar_key, new_compiler, open_message
from oss_responses.engine.response_format import REQUIRED_CALL_KEY, STRICT_CALLS_KEY, STRUCTURED_OUTPUT_KEY
from oss_responses.engine.scripted import CALL, CHANNEL, MESSAGE, START
from oss_responses.engine.vllm import FORCED_TOKENS_KEY

if TYPE_CHECKING:
    import xgrammar
    from vllm.config import VllmConfig

log = logging.getLogger(__name__)

def _spec_of(extra: dict[str, Any]) -> dict[str, Any] | None:
    spec = extra.get(STRUCTURED_OUTPUT_KEY)
    if spec is None:
        return None
    if not isinstance(spec, dict) or spec.get("type") not in ("json_schema", "json_object"):
        raise ValueError(f"extra_args[{STRUCTURED_OUTPUT_KEY!r}] must be a json_schema or json_object spec")
    if spec["type"] == "json_schema" and not isinstance(spec.get("schema"), dict):
        raise ValueError(f"extra_args[{STRUCTURED_OUTPUT_KEY!r}] json_schema needs a schema object")
    return spec


def _calls_of(extra: dict[str, Any]) -> dict[str, dict[str, Any]]:
    calls = extra.get(STRICT_CALLS_KEY) or {}
    if not isinstance(calls, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in calls.items()):
        raise ValueError(f"extra_args[{STRICT_CALLS_KEY!r}] must map recipients to schema objects")
    return calls


@dataclass(frozen=True)
class _RequiredCall:
    after: list[int]  # the header's start the worker wrote
    rests: list[list[int]]  # each way the model may finish it: a function's name, then up to <|message|>


def _required_of(extra: dict[str, Any]) -> _RequiredCall | None:
    spec = extra.get(REQUIRED_CALL_KEY)
    if spec is None:
        return None
    after, rests = (spec.get("after"), spec.get("rests")) if isinstance(spec, dict) else (None, None)
    if not _tokens(after) or not isinstance(rests, list) or not rests or not all(_tokens(rest) for rest in rests):
        raise ValueError(f"extra_args[{REQUIRED_CALL_KEY!r}] must give 'after' and 'rests' as token ids")
    return _RequiredCall(after, rests)


def _tokens(value: object) -> TypeGuard[list[int]]:
    return isinstance(value, list) and bool(value) and all(isinstance(token, int) and token >= 0 for token in value)


def _forced_length(extra: dict[str, Any]) -> int:
    script = extra.get(FORCED_TOKENS_KEY)
    return len(script) if isinstance(script, list) else 0


def _check_schema(schema: dict[str, Any]) -> None:
    """Refuse (before the request reaches the engine core) a schema xgrammar cannot turn into a grammar.

    The worker's ``GrammarBudget`` refuses it first (and one too costly to compile); this is the engine's
    own guard, cheap (no compile: 0.3-3 ms)."""
    import xgrammar

    try:
        xgrammar.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False, separators=SEPARATORS)
    except RuntimeError as exc:
        reason = str(exc).rsplit(": ", 1)[-1].strip() if ": " in str(exc) else str(exc).strip()
        raise ValueError(f"text.format.schema cannot be used for constrained decoding: {reason}") from exc


class Grammars:
    """The vocabulary as xgrammar sees it, and grammars compiled by schema (the most recent kept).

    Compiled in threads, never in the engine's step (``engine/grammar.py``): a request's grammars start
    compiling when it joins the batch, and its matcher waits for one only if the model reaches the
    constrained message first (after its analysis, most often, the grammar is long compiled); a request
    whose prompt opens that message joins once it compiled (``GrammarsWorkerExtension``)."""

    KEPT = 256

    def __init__(self, vocab_size: int) -> None:
        self.vocabulary, self.compiler = new_compiler(_vocab_folder(), vocab_size)
        self.final_token = self.vocabulary.index(b"final")
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="grammar")
        self._compiled: OrderedDict[str, Future[xgrammar.CompiledGrammar]] = OrderedDict()
        self._lock = threading.Lock()

    def compiling(self, schema: dict[str, Any], *, compact: bool) -> Future[xgrammar.CompiledGrammar]:
        """The schema's grammar, compiled or compiling: an answer's (``compact``) or a call's arguments'."""
        key = grammar_key(schema, compact=compact)
        with self._lock:
            if key in self._compiled:
                self._compiled.move_to_end(key)
                return self._compiled[key]
            future = self._threads.submit(compile_grammar, self.compiler, schema, compact=compact)
            self._compiled[key] = future
            if len(self._compiled) > self.KEPT:
                self._compiled.popitem(last=False)
            return future

    def text(self, tokens: Sequence[int]) -> str:
        """A header's text, each special token a space (``<|channel|>commentary to=functions.f <|constrain|>json``
        reads ``" commentary to=functions.f  json"``)."""
        return b"".join(self.vocabulary[token] or b" " for token in tokens).decode("utf-8", "replace")


_process_grammars: Future[Grammars] | None = None
_process_grammars_lock = threading.Lock()


def process_grammars(vocab_size: int) -> Future[Grammars]:
    """This process's ``Grammars``, built once in a thread (reading the vocabulary takes seconds): the one the
    logits processor compiles with and the one ``GrammarsWorkerExtension`` compiles ahead of a request."""
    global _process_grammars
    with _process_grammars_lock:
        if _process_grammars is None:
            building: Future[Grammars] = Future()
            building.set_running_or_notify_cancel()
            threading.Thread(target=_build_grammars, args=(building, vocab_size), name="grammar-vocabulary",
                             daemon=True).start()
            _process_grammars = building
        return _process_grammars


def _build_grammars(building: Future[Grammars], vocab_size: int) -> None:
    try:
        building.set_result(Grammars(vocab_size))
    except BaseException as error:
        building.set_exception(error)


def _matcher(grammar: Future[xgrammar.CompiledGrammar], what: str, **options: Any) -> xgrammar.GrammarMatcher | None:
    """A matcher once the grammar compiled (waiting for it here, in the step, only if it has not yet);
    None, logged, if it did not: an error here would take the engine core down."""
    import xgrammar

    try:
        return xgrammar.GrammarMatcher(grammar.result(), **options)
    except Exception:
        log.warning("structured output: %s did not compile; unconstrained", what, exc_info=True)
        return None


def _vocab_folder() -> Path:
    folder = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    if folder:
        return Path(folder)
    from oss_responses.config import get_settings

    return get_settings().tiktoken_dir


def _end_of(part: list[int], tokens: list[int]) -> int | None:
    """Where ``part`` ends in ``tokens`` (its first occurrence; None: not in them)."""
    for index in range(len(tokens) - len(part) + 1):
        if tokens[index:index + len(part)] == part:
            return index + len(part)
    return None


_RECIPIENT = re.compile(r"\bto=([^\s]+)")


@dataclass
class _Constrained:
    """One request: where its constrained message's content starts, and the matcher fed up to there.

    Positions count over the prompt's open message (``opened``), then the generated tokens."""

    grammars: Grammars
    answer: Future[xgrammar.CompiledGrammar] | None  # the response format's, for a final message
    calls: dict[str, Future[xgrammar.CompiledGrammar]]  # strict functions' arguments' by recipient
    generated: list[int]  # vLLM's live list of the request's output tokens
    opened: list[int] = field(default_factory=list)
    forced: int = 0  # the first tokens a forced script dictates: fed, not masked
    required: _RequiredCall | None = None
    header_at: int | None = None  # where the model's part of that header starts
    matcher: xgrammar.GrammarMatcher | None = None
    scanned: int = 0
    header_start: int = 0
    content_start: int | None = None
    fed: int = 0
    broken: bool = False

    def masks_next(self) -> bool:
        """Feed the new tokens; True when the next token is to be masked to the grammar."""
        return self._advance() and len(self.generated) >= self.forced

    def header_choices(self) -> list[int] | None:
        """The tokens that may come next in the header of a call ``tool_choice`` requires (None: no such
        header is being written): the next token of each way to finish it that the header still follows."""
        if self.required is None or len(self.generated) < self.forced:
            return None
        if self.header_at is None:
            self.header_at = _end_of(self.required.after, self.opened)
            if self.header_at is None:  # not this engine call's header (a later turn's prompt)
                self.required = None
                return None
        written = [self._at(index) for index in range(self.header_at, self._length())]
        choices = {rest[len(written)] for rest in self.required.rests
                   if len(rest) > len(written) and rest[:len(written)] == written}
        if not choices:  # the header is finished (or left the ways to finish it): nothing more to mask
            self.required = None
            return None
        return sorted(choices)

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        assert self.matcher is not None
        self.matcher.fill_next_token_bitmask(bitmask, row)

    def _advance(self) -> bool:
        """Feed the new tokens; True while the grammar constrains the next token."""
        if self.broken:
            return False
        if self.content_start is None and not self._find_constrained_content():
            return False
        assert self.content_start is not None and self.matcher is not None
        while self.content_start + self.fed < self._length():
            if not self.matcher.accept_token(self._at(self.content_start + self.fed)):
                # Only a token from elsewhere (a forced script) gets here: stop masking.
                log.warning("structured output: a constrained token outside the grammar; unconstrained from here")
                self.broken = True
                return False
            self.fed += 1
        return not self.matcher.is_terminated()

    def _length(self) -> int:
        return len(self.opened) + len(self.generated)

    def _at(self, index: int) -> int:
        opened = len(self.opened)
        return self.opened[index] if index < opened else self.generated[index - opened]

    def _find_constrained_content(self) -> bool:
        while self.scanned < self._length():
            token, index = self._at(self.scanned), self.scanned
            self.scanned += 1
            if token == START:
                self.header_start = self.scanned
            elif token == MESSAGE:
                self.matcher = self._matcher_for(range(self.header_start, index))
                if self.matcher is not None:
                    self.content_start = self.scanned
                    return True
        return False

    def opening_grammar(self) -> Future[xgrammar.CompiledGrammar] | None:
        """The grammar of a constrained message whose content the prompt opens (a takeover inside it): the
        request's first step needs it. None when the prompt opens no such message."""
        header_start = 0
        for index, token in enumerate(self.opened):
            if token == START:
                header_start = index + 1
            elif token == MESSAGE and (found := self._grammar_for(range(header_start, index))) is not None:
                return found[0]
        return None

    def _matcher_for(self, header: range) -> xgrammar.GrammarMatcher | None:
        found = self._grammar_for(header)
        if found is None:
            return None
        grammar, what, stops = found
        return _matcher(grammar, what, **({"override_stop_tokens": stops} if stops else {}))

    def _grammar_for(self, header: range) -> tuple[Future[xgrammar.CompiledGrammar], str, list[int]] | None:
        """The grammar of the message ``header`` opens, what it is, and its stop tokens (none: the compiler's);
        None for a message left free."""
        if self.answer is not None and self._is_final(header):
            # Compact JSON, then <|return|> (the compiler's stop token).
            return self.answer, "the response format's schema", []
        recipient = self._recipient(header) if self.calls else None
        if recipient is None or recipient not in self.calls:
            return None
        return self.calls[recipient], f"the parameters of {recipient}", [CALL]

    def _recipient(self, header: range) -> str | None:
        found = _RECIPIENT.search(self.grammars.text([self._at(index) for index in header]))
        return found.group(1) if found else None

    def _is_final(self, header: range) -> bool:
        final = self.grammars.final_token
        return any(self._at(a) == CHANNEL and self._at(a + 1) == final for a in header[:-1])


# vLLM is optional (OSS_RESPONSES_SKIP_ENGINE=1): without it this base is Any; with it the ignore is unused.
class StructuredFinalLogitsProcessor(LogitsProcessor):  # type: ignore[misc, unused-ignore]
    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        self._vocab_size = vllm_config.model_config.get_vocab_size()
        self._max_rows = vllm_config.scheduler_config.max_num_seqs
        self._bitmask: torch.Tensor | None = None
        self._by_row: dict[int, _Constrained] = {}

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        extra = sampling_params.extra_args or {}
        spec = _spec_of(extra)
        _calls_of(extra)
        _required_of(extra)
        if spec is not None and spec["type"] == "json_schema":
            _check_schema(spec["schema"])

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self._by_row, batch_update, self._new_request)

    def _new_request(
        self, params: SamplingParams, prompt: list[int] | None, generated: list[int]
    ) -> _Constrained | None:
        extra = params.extra_args or {}
        if _spec_of(extra) is None and not _calls_of(extra) and _required_of(extra) is None:
            return None
        if self._bitmask is None:
            import xgrammar

            self._bitmask = xgrammar.allocate_token_bitmask(self._max_rows, self._vocab_size)
        # Waited for here (in the step) only by the process's first constrained request, if no worker's
        # GrammarsWorkerExtension call started it.
        return constrained(process_grammars(self._vocab_size).result(), extra, open_message(prompt), generated)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for row, request in self._by_row.items():
            if (choices := request.header_choices()) is not None:
                _keep_only(logits, row, choices)
        rows = [row for row, request in self._by_row.items() if request.masks_next()]
        if not rows:
            return logits
        import xgrammar

        assert self._bitmask is not None
        for row in rows:
            self._by_row[row].fill_mask(self._bitmask, row)
        xgrammar.apply_token_bitmask_inplace(logits, self._bitmask.to(logits.device), indices=rows,
                                             vocab_size=min(self._vocab_size, logits.shape[-1]))
        return logits


def constrained(grammars: Grammars, extra: dict[str, Any], opened: list[int], generated: list[int]) -> _Constrained:
    """A request's state in the processor, its grammars compiling (``opened``: the prompt's open message)."""
    spec = _spec_of(extra)
    answer = None
    if spec is not None:  # json_object: any object
        answer = grammars.compiling(spec["schema"] if spec["type"] == "json_schema" else {"type": "object"},
                                    compact=True)
    compiling = {recipient: grammars.compiling(schema, compact=False) for recipient, schema in _calls_of(extra).items()}
    return _Constrained(grammars, answer, compiling, generated, opened, _forced_length(extra), _required_of(extra))


class GrammarsWorkerExtension:
    """Mixed into vLLM's worker (``worker_extension_cls``, engine/vllm.py), where the model runner and this
    processor live, for the worker's ``collective_rpc``: a takeover (or a handoff) inside a constrained
    message has a prompt that opens it, so its first step needs the grammar at once and compiled it in that
    step, every request on the engine waiting (2.5-4 s for a ``minLength: 1500`` string). The worker asks here
    before it adds such a request, until the grammar has compiled.

    vLLM runs a utility call between its steps, holding them while it runs: this only starts the compile in the
    threads beside the steps and says whether it is done (microseconds), and the worker polls."""

    vllm_config: VllmConfig  # the worker's

    def oss_responses_grammar_compiled(self, extra: dict[str, Any], opened: list[int]) -> bool:
        """Whether the grammar a request's first step needs is compiled here (its compile started if not):
        ``extra`` is its ``extra_args``, ``opened`` its prompt's open message (``open_message``)."""
        building = process_grammars(self.vllm_config.model_config.get_vocab_size())
        if not building.done():
            return False
        needed = constrained(building.result(), extra, opened, []).opening_grammar()
        return needed is None or needed.done()


def _keep_only(logits: torch.Tensor, row: int, tokens: list[int]) -> None:
    index = torch.tensor(tokens, device=logits.device)
    kept = logits[row].index_select(0, index)
    logits[row] = float("-inf")
    logits[row].index_copy_(0, index, kept)
