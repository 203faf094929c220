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
GIL hold is below a few tens of milliseconds). A child that dies (OOM-killed, say), or that gives no
answer within its deadline (stopped, hung: ``CHILD_FLOOR_SECONDS`` plus the prompt's cost at
``CHILD_CHARS_PER_SECOND``), is killed and replaced, and the prompts it held are tokenised again in the
new one, once: a prompt that breaks the second child too fails with ``TokenizerFailed``. Before, a
prompt sent to a child that had died while idle failed (``BrokenProcessPool``, a server_error for a
request that was fine), and one sent to a stopped child waited for good: its response stayed queued
with its lease renewed, and the worker's (or the API's) shutdown waited on the child too. An exception
in the child comes back as a ``TokenizerFailed`` (the tokenizer's own panic does not pickle).

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
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from pathlib import Path
from typing import Any

from openai_harmony import HarmonyEncoding

from oss_responses.harmony.message_tokens import MessageTokens, render_messages
from oss_responses.harmony.token_cost import cost_of

log = logging.getLogger(__name__)

# A child's answer is awaited for the floor plus the prompt's cost at this pace, 20 times slower than
# measured (0.2 s per MB of prose): a child past it is taken for hung (stopped, or stuck) and killed.
CHILD_FLOOR_SECONDS = 60.0
CHILD_CHARS_PER_SECOND = 250_000
# How long closing waits for a child to leave before it is killed (one stopped would never leave).
CHILD_EXIT_SECONDS = 5.0

_child_encoding: HarmonyEncoding | None = None


def _load_in_child(tiktoken_dir: str) -> None:
    global _child_encoding  # one encoding per child process, loaded by its initializer
    from oss_responses.vocab import load_encoding

    _child_encoding = load_encoding(Path(tiktoken_dir))


class TokenizerFailed(RuntimeError):
    """The tokenizer raised in the child process (its own exception, as text), or two children in a row
    died or gave no answer on the prompt."""


class TokenizerClosed(TokenizerFailed):
    """The tokenizer's child was closed (its process stops): a prompt it held, or one costly enough for it
    after, is not tokenised. Not the prompt's doing: a stopping worker hands such a run off."""


class _ChildLost(Exception):
    """The child died, or gave no answer in time, with the prompt in it or queued for it."""


def _render_in_child(messages: list[dict[str, Any]], function_tools: bool) -> list[list[int]]:
    assert _child_encoding is not None
    try:
        return render_messages(messages, function_tools, _child_encoding)
    except BaseException as exc:  # pyo3's PanicException is a BaseException, and cannot be pickled back
        raise TokenizerFailed(f"{type(exc).__name__}: {exc}") from None


class PromptTokenizer:
    def __init__(
        self, encoding: HarmonyEncoding, tiktoken_dir: Path, *, process_above_chars: int, cache_bytes: int = 0,
        child_floor_seconds: float = CHILD_FLOOR_SECONDS,
    ) -> None:
        self.encoding = encoding
        self.tiktoken_dir = tiktoken_dir
        self.process_above_chars = process_above_chars
        self.child_floor_seconds = child_floor_seconds
        self.messages = MessageTokens(encoding, cache_bytes)
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None
        # An async caller's prompts are tokenised in these threads, which may wait on the child for seconds:
        # in the loop's default executor they would hold up every other to_thread call of that loop.
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="prompt-tokenizer")
        self._lock = threading.Lock()
        self._closed = False

    async def tokenize(self, messages: list[dict[str, Any]], *, for_completion: bool) -> list[int]:
        """The prompt's tokens, computed off the calling (event loop) thread. See the module docstring."""
        tokenize = partial(self.tokenize_blocking, messages, for_completion=for_completion)
        return await asyncio.get_running_loop().run_in_executor(self._threads, tokenize)

    def tokenize_blocking(self, messages: list[dict[str, Any]], *, for_completion: bool) -> list[int]:
        """The same, from a thread that may block (a task thread): here, or waiting for the child."""
        return self.messages.tokenize(messages, for_completion=for_completion, render_missing=self._render_missing)

    def _render_missing(self, messages: list[dict[str, Any]], function_tools: bool) -> list[list[int]]:
        """The messages not kept: here if tokenizing them is cheap (``harmony/token_cost.py``), else in the child."""
        weight = cost_of(messages).weight
        if weight <= self.process_above_chars:
            return render_messages(messages, function_tools, self.encoding)
        deadline = self.child_floor_seconds + weight / CHILD_CHARS_PER_SECOND
        try:
            return self._in_child(messages, function_tools, deadline)
        except _ChildLost:  # not the prompt's doing, most likely: once more, in a new child
            pass
        try:
            return self._in_child(messages, function_tools, deadline)
        except _ChildLost as exc:
            raise TokenizerFailed(f"the prompt tokenizer process was lost twice on this prompt: {exc}") from None

    def _in_child(self, messages: list[dict[str, Any]], function_tools: bool, deadline: float) -> list[list[int]]:
        executor = self._child()
        try:
            future = self._submit(executor, messages, function_tools)
            while True:
                try:
                    return future.result(timeout=deadline)
                except concurrent.futures.TimeoutError:
                    if future.running():
                        break
                    # Still queued behind other prompts: the child's work on them is timed by their callers.
        except (BrokenProcessPool, concurrent.futures.CancelledError) as exc:  # cancelled: a caller replaced it
            self._replace(executor, "died")
            raise _ChildLost("it died") from exc
        self._replace(executor, f"gave no answer in {deadline:.0f} s")
        raise _ChildLost(f"no answer in {deadline:.0f} s")

    def _submit(
        self, executor: concurrent.futures.ProcessPoolExecutor, messages: list[dict[str, Any]], function_tools: bool
    ) -> concurrent.futures.Future[list[list[int]]]:
        try:
            return executor.submit(_render_in_child, messages, function_tools)
        except RuntimeError:  # shut down since _child gave it: closed (or replaced, and closed with it)
            if self._closed:
                raise TokenizerClosed("the prompt tokenizer is closed: this process is stopping") from None
            raise

    def _replace(self, executor: concurrent.futures.ProcessPoolExecutor, why: str) -> None:
        """The child killed (it may be stopped or stuck) and forgotten; the next prompt starts a new one."""
        with self._lock:
            if self._executor is not executor:
                return  # another caller replaced it already
            self._executor = None
        log.warning("the prompt tokenizer process %s; it is killed, and a new one tokenises its prompts", why)
        _kill(executor)

    def _child(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._closed:  # its process is stopping: a caller freed by the close's kill starts no child again
                raise TokenizerClosed("the prompt tokenizer is closed: this process is stopping")
            if self._executor is None:
                self._executor = concurrent.futures.ProcessPoolExecutor(
                    max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_load_in_child, initargs=(str(self.tiktoken_dir),),
                )
            return self._executor

    def close(self) -> None:
        """The child is given ``CHILD_EXIT_SECONDS`` to finish the prompt it holds and leave, then killed:
        waiting on it for good held a stopping worker (and API) up for as long as the child was stopped."""
        self.close_child(CHILD_EXIT_SECONDS)
        self._threads.shutdown(wait=False, cancel_futures=True)

    def close_child(self, exit_seconds: float = 0.0) -> None:
        """No prompt goes to a child from now on (``TokenizerClosed``), and the child is given ``exit_seconds``
        to leave, then killed: at once, by default. A stopping worker closes it first, as it hands every run
        off (what its child would tokenise is not used): a stopped child held the task threads waiting on it,
        and so the stop, for the stop's whole wait for them. Cheap prompts are still tokenised, in threads."""
        with self._lock:
            executor, self._executor = self._executor, None
            self._closed = True
        if executor is None:
            return
        processes = _processes(executor)
        executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.join(exit_seconds)
            if process.is_alive():
                process.kill()


def _processes(executor: concurrent.futures.ProcessPoolExecutor) -> list[multiprocessing.Process]:
    return list((executor._processes or {}).values())  # None once it shut down


def _kill(executor: concurrent.futures.ProcessPoolExecutor) -> None:
    """SIGKILL the executor's child (a stopped one does not see SIGTERM): the prompts it held fail with
    BrokenProcessPool, and the executor shuts down without waiting on it."""
    for process in _processes(executor):
        if process.is_alive():
            process.kill()
    executor.shutdown(wait=False, cancel_futures=True)
