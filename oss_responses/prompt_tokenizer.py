"""Tokenising prompts without stalling the process: a worker's engine loop, an API's event loop.

Measured (``tests/workers/test_prompt_tokenizer.py``; 2 shared cores): harmony's renderer is Rust
that holds the GIL for the whole call, 0.19 s for a 1 MB input and 0.9 s for 8 MB (and seconds for
one unbroken run of 50,000 characters: ``harmony/token_cost.py``), and a thread ticking every
millisecond meanwhile is stalled for all of it. So another *thread* does not help: on the loop or
beside it, a costly render stops every response the process serves for its duration.

A prompt that costs more than ``render_process_above_chars`` characters of prose (its
``TokenizingCost.weight``, of the messages not kept: below) is therefore tokenised in a child process
(one, started on first need, ``spawn``: a worker holds threads and maybe CUDA, which must not be
forked); the caller awaits it.
What stays in this process is the message dicts' pickling and the token list's unpickling, a few
milliseconds per MB, done in the executor's threads. Cheaper prompts are tokenised in a thread (their
GIL hold is below a few tens of milliseconds). A child that dies (OOM-killed, say) is replaced for the
next prompt; the prompt that was in it fails. An exception in the child comes back as a
``TokenizerFailed`` (the tokenizer's own panic does not pickle).

Each message's tokens are kept (``harmony/message_tokens.py``, ``render_cache_bytes``): a continued
conversation tokenises only its new messages, and whether that is costly is judged on them alone (an
earlier turn's long run no longer sends every later turn to the child).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing
import threading
from functools import partial
from pathlib import Path
from typing import Any

from openai_harmony import HarmonyEncoding

from oss_responses.harmony.message_tokens import MessageTokens, render_messages
from oss_responses.harmony.token_cost import cost_of

log = logging.getLogger(__name__)

_child_encoding: HarmonyEncoding | None = None


def _load_in_child(tiktoken_dir: str) -> None:
    global _child_encoding  # one encoding per child process, loaded by its initializer
    from oss_responses.vocab import load_encoding

    _child_encoding = load_encoding(Path(tiktoken_dir))


class TokenizerFailed(RuntimeError):
    """The tokenizer raised in the child process (its own exception, as text)."""


def _render_in_child(messages: list[dict[str, Any]], function_tools: bool) -> list[list[int]]:
    assert _child_encoding is not None
    try:
        return render_messages(messages, function_tools, _child_encoding)
    except BaseException as exc:  # pyo3's PanicException is a BaseException, and cannot be pickled back
        raise TokenizerFailed(f"{type(exc).__name__}: {exc}") from None


class PromptTokenizer:
    def __init__(
        self, encoding: HarmonyEncoding, tiktoken_dir: Path, *, process_above_chars: int, cache_bytes: int = 0
    ) -> None:
        self.encoding = encoding
        self.tiktoken_dir = tiktoken_dir
        self.process_above_chars = process_above_chars
        self.messages = MessageTokens(encoding, cache_bytes)
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None
        # An async caller's prompts are tokenised in these threads, which may wait on the child for seconds:
        # in the loop's default executor they would hold up every other to_thread call of that loop.
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="prompt-tokenizer")
        self._lock = threading.Lock()

    async def tokenize(self, messages: list[dict[str, Any]], *, for_completion: bool) -> list[int]:
        """The prompt's tokens, computed off the calling (event loop) thread. See the module docstring."""
        tokenize = partial(self.tokenize_blocking, messages, for_completion=for_completion)
        return await asyncio.get_running_loop().run_in_executor(self._threads, tokenize)

    def tokenize_blocking(self, messages: list[dict[str, Any]], *, for_completion: bool) -> list[int]:
        """The same, from a thread that may block (a task thread): here, or waiting for the child."""
        return self.messages.tokenize(messages, for_completion=for_completion, render_missing=self._render_missing)

    def _render_missing(self, messages: list[dict[str, Any]], function_tools: bool) -> list[list[int]]:
        """The messages not kept: here if tokenizing them is cheap (``harmony/token_cost.py``), else in the child."""
        if cost_of(messages).weight <= self.process_above_chars:
            return render_messages(messages, function_tools, self.encoding)
        executor = self._child()
        try:
            return executor.submit(_render_in_child, messages, function_tools).result()
        except concurrent.futures.process.BrokenProcessPool:
            self._replace(executor)
            raise

    def _replace(self, executor: concurrent.futures.ProcessPoolExecutor) -> None:
        log.warning("the prompt tokenizer process died; a new one serves the next prompt")
        with self._lock:
            if self._executor is executor:
                self._executor = None
        executor.shutdown(wait=False, cancel_futures=True)

    def _child(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ProcessPoolExecutor(
                    max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_load_in_child, initargs=(str(self.tiktoken_dir),),
                )
            return self._executor

    def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        self._threads.shutdown(wait=False, cancel_futures=True)
