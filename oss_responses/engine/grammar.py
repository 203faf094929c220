"""JSON schemas as xgrammar grammars: compiled the one way the structured-output processor compiles
them (``engine/structured.py``), and the worker's time budget for that compile.

xgrammar compiles a grammar against the whole vocabulary (o200k's 201,088 tokens), and its cost
follows the schema's shape, not its size. Measured on one core: two properties 1-2 ms, a person with
a nested address and a ``pattern`` 80-90 ms, 200 required properties 30-250 ms; ``minLength: 2000``
3-4 s, ``"pattern": "^([a-z]{1,30}){1,5}$"`` 3-4 s; with ``{1,30}`` in place of ``{1,5}`` 50-66 s
and ``minLength: 20000`` 5-13 s (the security probe). Compiled inside the engine's step, one such
request held every response on the GPU for its whole compile.

So the engine core compiles off its step, in threads (xgrammar releases the GIL while it compiles: a
thread ticking every millisecond beside a 3 s compile waited 4.6 ms at most), and a request reaches
the engine only once each of its grammars compiled within ``grammar_compile_seconds`` in a child
process of the worker (:class:`GrammarBudget`): a schema over it is refused, its response failed
(``SchemaNotConstrainable``), and its child killed. What passed is remembered by schema (the most
recent 1,024), so the child compiles each schema once; the engine compiles it again, off its step.
A request whose prompt opens a constrained message (a takeover inside it) is added to the engine only
once the engine's processes compiled that grammar (``VllmEngine``, ``structured.GrammarsWorkerExtension``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oss_responses.engine.base import SchemaNotConstrainable
from oss_responses.engine.response_format import STRICT_CALLS_KEY, STRUCTURED_OUTPUT_KEY
from oss_responses.engine.scripted import CALL, END, RETURN, START

if TYPE_CHECKING:
    import xgrammar

log = logging.getLogger(__name__)

SEPARATORS = (",", ":")


def grammar_key(schema: dict[str, Any], *, compact: bool) -> str:
    return json.dumps([schema, compact], sort_keys=True)


def new_compiler(tiktoken_dir: Path, vocab_size: int) -> tuple[list[bytes], xgrammar.GrammarCompiler]:
    """The vocabulary as xgrammar sees it (o200k bytes, special tokens empty) and a compiler over it."""
    import xgrammar

    from oss_responses.vocab import token_bytes

    vocabulary = token_bytes(tiktoken_dir, vocab_size)
    # <|return|> ends an answer: the grammar's stop token (a call's matcher overrides it with <|call|>).
    info = xgrammar.TokenizerInfo(vocabulary, xgrammar.VocabType.RAW, vocab_size=vocab_size, stop_token_ids=[RETURN])
    # The caller keeps what it compiled (by grammar_key); xgrammar's own cache would keep it twice.
    return vocabulary, xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)


def compile_grammar(
    compiler: xgrammar.GrammarCompiler, schema: dict[str, Any], *, compact: bool
) -> xgrammar.CompiledGrammar:
    """An answer's grammar (``compact``: compact separators, as the scripted engine writes JSON), or a
    call's arguments' (one whitespace character where JSON allows some: more would let a model pad forever)."""
    if compact:
        return compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=SEPARATORS)
    return compiler.compile_json_schema(json.dumps(schema), any_whitespace=True, max_whitespace_cnt=1)


def open_message(prompt: Sequence[int] | None) -> list[int]:
    """The prompt's last message if it is still open (from its ``<|start|>``): the start of the output.

    A prompt for completion ends with ``<|start|>assistant``; a continued one with a header, or a
    message's content, that the lost worker (or the worker, forcing a call) wrote."""
    if not prompt:
        return []
    for index in range(len(prompt) - 1, -1, -1):
        if prompt[index] in _MESSAGE_ENDS:
            return []
        if prompt[index] == START:
            return list(prompt[index:])
    return []


_MESSAGE_ENDS = frozenset((END, RETURN, CALL))


@dataclass(frozen=True, slots=True)
class Grammar:
    """One grammar a request needs: its schema, how it is compiled, and what the client calls it."""

    schema: dict[str, Any]
    compact: bool
    name: str  # "The schema of text.format", or "The parameters of function 'NAME'"
    recipient: str | None = None  # a strict function's (``functions.NAME``); None: the answer's
    key: str = ""  # grammar_key, computed once (a schema may be large; it is looked up several times)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", grammar_key(self.schema, compact=self.compact))


def grammars_of(extra: dict[str, Any]) -> Iterator[Grammar]:
    """The grammars the structured-output processor compiles for a request's ``SamplingSettings.extra``."""
    spec = extra.get(STRUCTURED_OUTPUT_KEY)
    if isinstance(spec, dict) and spec.get("type") in ("json_schema", "json_object"):
        schema = spec.get("schema") if spec["type"] == "json_schema" else {"type": "object"}
        if isinstance(schema, dict):
            yield Grammar(schema, True, "The schema of text.format")
    for recipient, schema in (extra.get(STRICT_CALLS_KEY) or {}).items():
        name = recipient.split(".", 1)[-1]
        yield Grammar(schema, False, f"The parameters of function '{name}'", recipient)


def _serve(conn: Connection, tiktoken_dir: str, vocab_size: int) -> None:
    """The child: compile each (schema, compact) it is sent; answer None, or why it does not compile."""
    _, compiler = new_compiler(Path(tiktoken_dir), vocab_size)
    conn.send("ready")
    while True:
        try:
            schema, compact = conn.recv()
        except EOFError:
            return
        try:
            compile_grammar(compiler, schema, compact=compact)
            conn.send(None)
        except Exception as exc:  # xgrammar's RuntimeError for what JSON schema it cannot express
            conn.send(str(exc).rsplit(": ", 1)[-1].strip() or type(exc).__name__)


class _Child:
    def __init__(self, tiktoken_dir: Path, vocab_size: int) -> None:
        context = multiprocessing.get_context("spawn")  # a worker holds threads (and maybe CUDA): never fork
        self.conn, child_conn = context.Pipe()
        self.process: BaseProcess = context.Process(target=_serve, args=(child_conn, str(tiktoken_dir), vocab_size),
                                                    name="grammar-budget", daemon=True)
        self.process.start()
        child_conn.close()
        # Importing xgrammar and reading the vocabulary: seconds, not counted in any schema's budget.
        try:
            started = self.conn.poll(_START_SECONDS) and self.conn.recv() == "ready"
        except (OSError, EOFError):
            started = False
        if not started:
            self.kill()
            raise RuntimeError("the grammar budget's child process did not start")

    def compile(self, grammar: Grammar, seconds: float) -> str | None:
        """None: compiled within ``seconds``; else why not. Raises TimeoutError (the child is then killed)."""
        self.conn.send((grammar.schema, grammar.compact))
        if not self.conn.poll(seconds):
            self.kill()
            raise TimeoutError
        answer: str | None = self.conn.recv()
        return answer

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


_START_SECONDS = 120.0
_UNKNOWN = "not tried yet"
_TOO_SLOW = "its grammar did not compile within"


class GrammarBudget:
    """Admits a request to the engine once each of its grammars compiles within ``seconds`` (see the module
    docstring). Thread-safe; at most ``children`` schemas compile at once, in as many child processes."""

    KEPT = 1024

    def __init__(self, tiktoken_dir: Path, vocab_size: int, seconds: float, *, children: int = 2) -> None:
        self.tiktoken_dir = tiktoken_dir
        self.vocab_size = vocab_size
        self.seconds = seconds
        self._idle: list[_Child] = []
        self._slots = threading.Semaphore(children)
        self._lock = threading.Lock()
        self._known: OrderedDict[str, str | None] = OrderedDict()  # key -> None (admitted) or why refused

    async def admit(self, extra: dict[str, Any]) -> dict[str, Any]:
        """``extra`` once each of its grammars is known to compile in time (a thread waits for the child).

        Raises ``SchemaNotConstrainable`` for an answer's schema that does not compile, and for any that
        takes too long; a strict function whose schema xgrammar cannot express is left out of the
        returned ``extra`` (its calls run unconstrained, as its engine would run them)."""
        if self.known(extra):
            return extra
        return await asyncio.get_running_loop().run_in_executor(None, self.admit_blocking, extra)

    def known(self, extra: dict[str, Any]) -> bool:
        """Whether every grammar of ``extra`` is known to compile in time (``admit`` then returns at once)."""
        return all(self._admitted(grammar) for grammar in grammars_of(extra))

    def admit_blocking(self, extra: dict[str, Any]) -> dict[str, Any]:
        unconstrained = []
        for grammar in grammars_of(extra):
            if self._verdict(grammar) is _UNKNOWN:
                self._remember(grammar.key, self._check(grammar))
            if (verdict := self._verdict(grammar)) is None:
                continue
            if grammar.recipient is None or verdict.startswith(_TOO_SLOW):
                raise SchemaNotConstrainable(f"{grammar.name} cannot be used for constrained decoding: {verdict}")
            log.warning("%s cannot be used for constrained decoding (%s): its calls run unconstrained",
                        grammar.name, verdict)
            unconstrained.append(grammar.recipient)
        if not unconstrained:
            return extra
        calls = {recipient: schema for recipient, schema in extra[STRICT_CALLS_KEY].items()
                 if recipient not in unconstrained}
        return {**extra, STRICT_CALLS_KEY: calls}

    def _admitted(self, grammar: Grammar) -> bool:
        return self._verdict(grammar) is None

    def _verdict(self, grammar: Grammar) -> str | None:
        """None: compiles in time; else why not (``_UNKNOWN``: not tried yet)."""
        with self._lock:
            return self._known.get(grammar.key, _UNKNOWN)

    def _remember(self, key: str, verdict: str | None) -> None:
        with self._lock:
            self._known[key] = verdict
            self._known.move_to_end(key)
            while len(self._known) > self.KEPT:
                self._known.popitem(last=False)

    def _check(self, grammar: Grammar) -> str | None:
        with self._slots:
            for attempt in (1, 2):
                child = self._take_child()
                try:
                    verdict = child.compile(grammar, self.seconds)
                except TimeoutError:
                    log.warning("%s did not compile within %.1f s: refused", grammar.name, self.seconds)
                    return (f"{_TOO_SLOW} {self.seconds:g} s (OSS_RESPONSES_GRAMMAR_COMPILE_SECONDS); simplify it: "
                            "a long minLength, maxLength, minItems or maxItems, or a pattern with nested or large "
                            "repetition counts, compiles slowly")
                except (OSError, EOFError):  # the child died (OOM-killed, say): once more, in a new one
                    child.kill()
                    if attempt == 2:
                        raise
                    log.warning("the grammar budget's child process died; checking %s in a new one", grammar.name)
                    continue
                self._give_back(child)
                return verdict
        raise AssertionError("unreachable")

    def warm(self) -> None:
        """Start a child ahead of the first schema: importing xgrammar and reading the vocabulary take
        4 s of CPU (18 s on this machine's loaded cores), which that request would otherwise wait."""
        try:
            with self._slots:
                self._give_back(self._take_child())
        except Exception:
            log.warning("the grammar budget's child process did not start (the first schema will start one)",
                        exc_info=True)

    def _take_child(self) -> _Child:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Child(self.tiktoken_dir, self.vocab_size)

    def _give_back(self, child: _Child) -> None:
        with self._lock:
            self._idle.append(child)

    def close(self) -> None:
        with self._lock:
            children, self._idle = self._idle, []
        for child in children:
            child.kill()
