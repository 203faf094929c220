"""A large prompt is tokenised without stalling the engine loop (and so every other running response).

harmony's tokeniser holds the GIL for the whole call: in a thread it stalls the loop as much as on it,
so prompts above ``render_process_above_chars`` go to a child process (prompt_tokenizer.py).
The probe is a coroutine on the engine loop that wakes every 5 ms: its worst lateness is how long
every running response's generation and events were held up.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

import pytest
import redis as redis_lib
from support import TIKTOKEN_DIR
from support.workers import accept

from oss_responses.config import Settings
from oss_responses.harmony.render import tokenize_messages
from oss_responses.heap import tune_garbage_collection
from oss_responses.prompt_tokenizer import PromptTokenizer, TokenizerClosed, TokenizerFailed
from oss_responses.storage import Database
from oss_responses.vocab import load_encoding
from oss_responses.workers.context import WorkerContext
from oss_responses.workers.testing import local_worker, run_response_now

_T = TypeVar("_T")

BIG_INPUT = ("lorem ipsum dolor sit amet " * 250_000)[:6_000_000]  # ~1.1M tokens: ~0.7 s of tokenising
# Measured 21-60 ms alone, 381 ms once under the whole suite on two cores; the same tokenising in a thread
# of the worker stalls the loop 0.4-1.3 s (below), about 1 s when the machine is idle.
STALL_BOUND_S = 0.5
THREAD_STALL_AT_LEAST_S = 0.1


async def _worst_lateness(stop: threading.Event) -> float:
    worst = 0.0
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.005)
        worst = max(worst, time.perf_counter() - start - 0.005)
    return worst


def _stall_while_running(ctx: WorkerContext, response_id: str) -> float:
    stop = threading.Event()
    probe = ctx.loop.submit(_worst_lateness(stop))
    try:
        # The scripted engine echoes the input: max_output_tokens stops it early, so "incomplete".
        assert run_response_now(response_id, worker=ctx) == "incomplete"
    finally:
        stop.set()
    return probe.result(timeout=10)


def _answer_without_parsing(ctx: WorkerContext, db: Database, redis: redis_lib.Redis, settings: Settings) -> None:
    """The scripted engine parses the whole prompt back (harmony, on the loop) to pick its answer, a
    cost of the stand-in that vLLM does not have: after one small response, it gives that same answer
    to every prompt, so the probe sees the worker's own path only."""
    writer = ctx.engine.writer  # type: ignore[attr-defined]
    parse, answers = writer.script_for, []

    def script_for(prompt_token_ids: list[int]) -> list[int]:
        if not answers:
            answers.append(parse(prompt_token_ids))
        return answers[0]

    writer.script_for = script_for
    run_response_now(accept(db, redis, settings, input="x " * 200_000, max_output_tokens=16), worker=ctx)


@pytest.fixture
def worker_heap() -> Iterator[None]:
    """The collector as a worker process has it (``tune_garbage_collection`` at its start): what was
    allocated before is frozen. Without it the probe also measured this test process's own full
    collections, a pass over the whole suite's heap that holds the GIL, and so the loop, for hundreds
    of ms (599 ms once in CI, on a slow machine; 233 ms here for a heap of vLLM's and torch's imports
    alone): a pause a worker does not have."""
    thresholds = gc.get_threshold()
    tune_garbage_collection("test")
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.fixture
def worker_for(settings: Settings, worker_heap: None) -> Iterator:  # type: ignore[type-arg]
    contexts: list[WorkerContext] = []

    def start(process_above_chars: int) -> WorkerContext:
        manager = local_worker(settings.model_copy(update={"render_process_above_chars": process_above_chars}))
        contexts.append(manager)  # type: ignore[arg-type]
        return manager.__enter__()

    yield start
    for manager in contexts:
        manager.__exit__(None, None, None)  # type: ignore[attr-defined]


def test_tokenize_in_child_process_equals_tokenize_inline(settings: Settings) -> None:
    encoding = load_encoding(settings.tiktoken_dir)
    messages = [{"role": "user", "content": [{"type": "text", "text": "hello " * 500}]}]
    tokenizer = PromptTokenizer(encoding, settings.tiktoken_dir, process_above_chars=100)
    try:
        in_child = asyncio.run(tokenizer.tokenize(messages, for_completion=True))
    finally:
        tokenizer.close()
    assert in_child == tokenize_messages(messages, True, encoding)


def test_tokenize_blocking_in_child_process_equals_tokenize_inline(settings: Settings) -> None:
    encoding = load_encoding(settings.tiktoken_dir)
    messages = [{"role": "user", "content": [{"type": "text", "text": "hello " * 500}]}]
    tokenizer = PromptTokenizer(encoding, settings.tiktoken_dir, process_above_chars=100)
    try:
        in_child = tokenizer.tokenize_blocking(messages, for_completion=True)
    finally:
        tokenizer.close()
    assert in_child == tokenize_messages(messages, True, encoding)


def test_render_large_input_does_not_stall_engine_loop(
    worker_for, db: Database, redis: redis_lib.Redis, settings: Settings  # type: ignore[no-untyped-def]
) -> None:
    ctx = worker_for(262_144)
    _answer_without_parsing(ctx, db, redis, settings)  # its 400 kB prompt also starts the child process
    stall = _stall_while_running(ctx, accept(db, redis, settings, input=BIG_INPUT, max_output_tokens=16))
    print(f"\nengine loop's worst stall, 6 MB input tokenised in the child process: {stall * 1000:.0f} ms")
    assert stall < STALL_BOUND_S


def test_render_large_input_in_a_thread_stalls_engine_loop(
    worker_for, db: Database, redis: redis_lib.Redis, settings: Settings  # type: ignore[no-untyped-def]
) -> None:
    """Why the child process: the same input tokenised in a thread holds the loop up for the whole render."""
    ctx = worker_for(10**12)
    _answer_without_parsing(ctx, db, redis, settings)
    stall = _stall_while_running(ctx, accept(db, redis, settings, input=BIG_INPUT, max_output_tokens=16))
    print(f"\nengine loop's worst stall, 6 MB input tokenised in a thread: {stall * 1000:.0f} ms")
    # Measured 0.4-1.3 s on 2 shared cores; 1.1M tokens take over 0.1 s on any CPU (Rust BPE, ~10M tokens/s at best).
    assert stall > THREAD_STALL_AT_LEAST_S


def test_render_unbroken_run_does_not_stall_engine_loop(
    worker_for, db: Database, redis: redis_lib.Redis, settings: Settings  # type: ignore[no-untyped-def]
) -> None:
    """50,000 ``x`` are little text but ~1 s of tokenizing (its square: harmony/token_cost.py): the prompt's
    cost, not its size, sends it to the child process."""
    ctx = worker_for(262_144)
    _answer_without_parsing(ctx, db, redis, settings)
    stall = _stall_while_running(ctx, accept(db, redis, settings, input="x" * 50_000, max_output_tokens=16))
    print(f"\nengine loop's worst stall, a 50,000-character run tokenised in the child process: {stall * 1000:.0f} ms")
    assert stall < STALL_BOUND_S


def test_tokenizer_error_in_child_process_is_raised_as_tokenizer_failed(settings: Settings) -> None:
    encoding = load_encoding(settings.tiktoken_dir)
    tokenizer = PromptTokenizer(encoding, settings.tiktoken_dir, process_above_chars=0)
    try:
        with pytest.raises(TokenizerFailed, match="ValueError: Unknown role"):
            tokenizer.tokenize_blocking([{"role": "nobody", "content": []}], for_completion=True)
    finally:
        tokenizer.close()


def _user(text: str) -> dict:
    return {"role": "user", "name": None, "content": [{"type": "text", "text": text}]}


def test_costly_prompt_whose_new_messages_are_cheap_is_tokenised_here(settings: Settings) -> None:
    """A long conversation's next turn: its earlier messages are kept, and only the new one is rendered,
    in this process (no child started)."""
    encoding = load_encoding(settings.tiktoken_dir)
    history = [_user("hello " * 500)]
    tokenizer = PromptTokenizer(encoding, settings.tiktoken_dir, process_above_chars=1_000, cache_bytes=1 << 20)
    try:
        tokenizer.messages.tokenize(history, for_completion=True)  # as the turn before left them
        messages = [*history, _user("and again")]
        assert tokenizer.tokenize_blocking(messages, for_completion=True) == \
            tokenize_messages(messages, True, encoding)
        assert tokenizer._executor is None
    finally:
        tokenizer.close()


def test_costly_new_message_is_tokenised_in_child_process_beside_kept_ones(settings: Settings) -> None:
    encoding = load_encoding(settings.tiktoken_dir)
    tokenizer = PromptTokenizer(encoding, settings.tiktoken_dir, process_above_chars=1_000, cache_bytes=1 << 20)
    try:
        tokenizer.tokenize_blocking([_user("hi")], for_completion=True)
        assert tokenizer._executor is None
        messages = [_user("hi"), _user("world " * 500)]
        assert tokenizer.tokenize_blocking(messages, for_completion=True) == \
            tokenize_messages(messages, True, encoding)
        assert tokenizer._executor is not None
    finally:
        tokenizer.close()


def test_prompt_whose_earlier_turns_are_costly_to_tokenize_goes_to_child_process_once(settings: Settings) -> None:
    """An unbroken run costs the square of its length (harmony/token_cost.py): the first render of a history
    of such runs goes to the child; the next turn, its messages kept, renders only its new message here."""
    encoding = load_encoding(settings.tiktoken_dir)
    history = [_user("acgt" * 2_000) for _ in range(2)]  # 8,000 bytes: 250,000 characters' worth each
    tokenizer = PromptTokenizer(encoding, settings.tiktoken_dir, process_above_chars=100_000, cache_bytes=1 << 20)
    try:
        first = [*history, _user("and this one?")]
        assert tokenizer.tokenize_blocking(first, for_completion=True) == tokenize_messages(first, True, encoding)
        assert tokenizer._executor is not None
        tokenizer.close()
        second = [*first, _user("and now?")]
        assert tokenizer.tokenize_blocking(second, for_completion=True) == tokenize_messages(second, True, encoding)
        assert tokenizer._executor is None
    finally:
        tokenizer.close()


def _child_pid(tokenizer: PromptTokenizer) -> int:
    assert tokenizer._executor is not None
    (pid,) = tokenizer._executor._processes  # type: ignore[union-attr]
    return pid


def _in_a_thread(call: Callable[[], _T], guard_s: float) -> _T:
    """``call()`` in a thread, given up after ``guard_s`` (a hang fails the test instead of holding it)."""
    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(call).result(timeout=guard_s)
    except TimeoutError:
        pytest.fail(f"no answer within {guard_s} s")
    finally:
        pool.shutdown(wait=False)  # not waiting on a call that hangs


def test_tokenize_replaces_child_that_died_while_idle() -> None:
    """A child killed between two prompts (the OOM killer): the next prompt is tokenised by a new one. It
    failed with BrokenProcessPool, and its response with a server_error, though nothing was wrong with it."""
    encoding = load_encoding(TIKTOKEN_DIR)
    messages = [_user("hello " * 500)]
    tokenizer = PromptTokenizer(encoding, TIKTOKEN_DIR, process_above_chars=100)
    try:
        tokenizer.tokenize_blocking([_user("warm " * 500)], for_completion=True)
        os.kill(_child_pid(tokenizer), signal.SIGKILL)
        time.sleep(0.5)  # the executor sees it gone
        assert tokenizer.tokenize_blocking(messages, for_completion=True) == tokenize_messages(messages, True, encoding)
    finally:
        tokenizer.close()


def test_tokenize_replaces_child_stopped_past_its_deadline() -> None:
    """A stopped (or stuck) child: past its deadline it is killed and the prompt goes to a new one. The caller
    waited for good: a worker's response stayed queued with its lease renewed."""
    encoding = load_encoding(TIKTOKEN_DIR)
    messages = [_user("hello " * 500)]
    tokenizer = PromptTokenizer(encoding, TIKTOKEN_DIR, process_above_chars=100)
    try:
        tokenizer.tokenize_blocking([_user("warm " * 500)], for_completion=True)
        # Short, but longer than a new child's start on a loaded machine (spawned, the encoding loaded: in
        # CI a 1 s floor failed the warm-up itself): the deadline counts from when the prompt is sent.
        tokenizer.child_floor_seconds = 10.0
        stopped = _child_pid(tokenizer)
        os.kill(stopped, signal.SIGSTOP)
        try:
            tokens = _in_a_thread(partial(tokenizer.tokenize_blocking, messages, for_completion=True), 60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        assert tokens == tokenize_messages(messages, True, encoding)
        assert _child_pid(tokenizer) != stopped
    finally:
        tokenizer.close()


def test_close_kills_child_that_is_stopped() -> None:
    """Closing (a worker or API stopping) does not wait on a stopped child for good: it held the process's
    shutdown for as long as the child stayed stopped."""
    encoding = load_encoding(TIKTOKEN_DIR)
    tokenizer = PromptTokenizer(encoding, TIKTOKEN_DIR, process_above_chars=100)
    tokenizer.tokenize_blocking([_user("warm " * 500)], for_completion=True)
    stopped = _child_pid(tokenizer)
    os.kill(stopped, signal.SIGSTOP)
    try:
        _in_a_thread(tokenizer.close, 30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGCONT)


def test_tokenize_after_close_starts_no_child() -> None:
    """A caller freed by the close's kill of a stopped child tried its prompt again in a new child: a stopping
    worker spawned one (the encoding loaded: a second or more) for a task that no longer ran."""
    encoding = load_encoding(TIKTOKEN_DIR)
    tokenizer = PromptTokenizer(encoding, TIKTOKEN_DIR, process_above_chars=100)
    tokenizer.close()
    with pytest.raises(TokenizerFailed, match="closed"):
        tokenizer.tokenize_blocking([_user("hello " * 500)], for_completion=True)
    assert tokenizer._executor is None


def test_close_child_frees_caller_waiting_on_stopped_child_at_once() -> None:
    """A stopping worker closes the child first (every run is handed off: what it tokenises is not used): a
    caller waiting on a stopped child is freed at once, with TokenizerClosed, not after close's grace."""
    encoding = load_encoding(TIKTOKEN_DIR)
    tokenizer = PromptTokenizer(encoding, TIKTOKEN_DIR, process_above_chars=100)
    try:
        tokenizer.tokenize_blocking([_user("warm " * 500)], for_completion=True)
        stopped = _child_pid(tokenizer)
        os.kill(stopped, signal.SIGSTOP)
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(tokenizer.tokenize_blocking, [_user("hello " * 500)], for_completion=True)
            time.sleep(0.5)  # its prompt sent to the stopped child
            started = time.monotonic()
            tokenizer.close_child()
            with pytest.raises(TokenizerClosed):
                waiting.result(timeout=10)
            assert time.monotonic() - started < 2.0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGCONT)
        tokenizer.close()


def test_tokenize_after_close_child_tokenizes_cheap_prompt_in_thread() -> None:
    """The engine loop still renders (a stopping worker's runs hand off once their prompt is in): a cheap
    prompt is tokenised as before, only a costly one is refused."""
    encoding = load_encoding(TIKTOKEN_DIR)
    tokenizer = PromptTokenizer(encoding, TIKTOKEN_DIR, process_above_chars=100)
    try:
        tokenizer.close_child()
        cheap = [_user("hello")]
        assert asyncio.run(tokenizer.tokenize(cheap, for_completion=True)) == tokenize_messages(cheap, True, encoding)
        with pytest.raises(TokenizerClosed):
            asyncio.run(tokenizer.tokenize([_user("hello " * 500)], for_completion=True))
        assert tokenizer._executor is None
    finally:
        tokenizer.close()
