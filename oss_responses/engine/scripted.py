"""The scripted engine: a deterministic stand-in for gpt-oss, for client tests, demos and benchmarks.

It implements :class:`oss_responses.engine.base.Engine` without any model. It decodes the rendered
harmony prompt back into messages and answers in valid harmony tokens, exactly as gpt-oss would
frame them, so everything downstream (translator, event log, API, SDK clients) runs for real.

What it answers (always an ``analysis`` message first, then one of):

1. the last user message contains ``call RECIPIENT ARGS`` → that tool call, ending in ``<|call|>``:
   ``call functions.get_weather {"city": "Paris"}`` (a function call), ``call calc.add {"a":1,"b":2}``
   (an MCP tool ``add`` of the server labelled ``calc``), ``call python 123*456`` (the built-in
   python tool). JSON arguments get ``<|constrain|>json``. Functions and MCP tools are called on the
   ``commentary`` channel; the built-in ``python``/``browser`` tools on ``analysis``, as gpt-oss does.
   Several ``call`` directives are made in order, one per turn (after k tool results, the k+1-th);
2. the request asks for structured output (``text.format``, read back from the developer message's
   ``# Response Formats`` section) → a ``final`` answer that is the JSON: for ``json_schema`` a
   deterministic instance of the schema (:mod:`oss_responses.engine.json_instance`, free strings
   taken from the text rule 3 would answer, else the last user message), for ``json_object``
   ``{"answer": THAT_TEXT}``. On vLLM the format constrains every final answer, so it wins here too;
3. the last message of the prompt is a tool result → a ``final`` answer quoting it
   (``The tool functions.get_weather returned: {"temp": 20}``);
4. the last user message contains ``tokens N`` → a ``final`` answer of exactly N content tokens;
5. otherwise → a ``final`` answer quoting the last user message and listing the earlier user messages
   of the conversation in order (so chained turns via ``previous_response_id`` are visible).

A prompt that ends with the start of a call the worker wrote for the model (a forcing ``tool_choice``)
gets the rest of that call: the last user message's first ``call RECIPIENT ARGS`` that fits the start,
else the tool the start names or the first tool of its namespace, with the simplest arguments its
signature in the developer message allows (:mod:`oss_responses.engine.signature_instance`: every
required field; ``{}`` for a tool the prompt does not declare; ``python``: ``1+1``; ``browser``: a
search for the user's words).

A prompt that already ends with the start of the answer (a worker taking a response over continues
from prompt + generated tokens) gets the rest of that same answer, so a taken-over response ends
with exactly the text of an uninterrupted one.

Like vLLM it emits one token per output, includes the stop token (``<|return|>`` or ``<|call|>``) in
the output, stops with ``finish_reason="length"`` at ``max_tokens``, and ends a request within one
step of :meth:`ScriptedEngine.abort` (``finish_reason="abort"``).

Speed (settings ``scripted_tokens_per_second`` and ``scripted_step_interval_seconds``):

- ``tokens_per_second`` > 0: each response waits ``1 / tokens_per_second`` between its tokens;
- ``step_interval_seconds`` > 0: a shared stepping clock, as in continuous batching — every step
  each running response emits one token, then all wait for the next step; ``stream`` (the worker's
  way) hands every response's output of a step to its callback in one pass of the clock's task, as
  vLLM's output handler does;
- both 0 (the default): as fast as the event loop allows (one loop turn per token).
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from openai_harmony import HarmonyEncoding, Message, Role

from oss_responses.config import Settings
from oss_responses.engine.base import EngineOutput, OutputSink, SamplingSettings, check_prompt_length
from oss_responses.engine.json_instance import instance_of
from oss_responses.engine.response_format import ResponseFormat, requested_format
from oss_responses.engine.signature_instance import arguments_of
from oss_responses.harmony.builtin_tools import BROWSER, BUILTIN_CALL_CHANNEL, BUILTIN_NAMESPACES, PYTHON
from oss_responses.harmony.render import function_call_header_rest
from oss_responses.harmony.token_cost import split_long_runs
from oss_responses.statuses import FinishReason

START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL = 200006, 200007, 200008, 200005, 200003, 200002, 200012
_CALL = re.compile(r"\bcall\s+([A-Za-z_][\w.\-]*)\s*(.*?)\s*(?=\bcall\s+[A-Za-z_]|\Z)", re.DOTALL)
_TOKENS = re.compile(r"\btokens\s+(\d+)\b")
_FUNCTION_TYPE = re.compile(r"^type ([\w-]+) =", re.MULTILINE)
_RECIPIENT = re.compile(r"[\w.\-]+")
# A forced start (harmony/render.py: forced_call_header): its namespace, and a tool's name when a
# space or token follows it (the whole header was written, or the model went on).
_FORCED = re.compile(r"<\|channel\|>(?:analysis|commentary) to=([\w\-]+)(?:\.(?:([\w\-]+)(?= |<\|))?)?")
# How many trailing message starts a continuation is looked for behind (an answer has at most two
# messages: analysis, then final or a call).
_CONTINUATION_DEPTH = 4
_FILLER_WORDS = (" lorem", " ipsum", " dolor", " sit", " amet", " consectetur", " adipiscing", " elit")


def text_of(message: Message) -> str:
    return "".join(getattr(part, "text", "") for part in message.content)


def parse_prompt(encoding: HarmonyEncoding, prompt_token_ids: Sequence[int]) -> list[Message]:
    """The messages of a rendered prompt, without its trailing open ``<|start|>assistant`` header."""
    tokens = list(prompt_token_ids)
    if START in tokens:
        last_start = len(tokens) - 1 - tokens[::-1].index(START)
        if MESSAGE not in tokens[last_start:]:
            tokens = tokens[:last_start]
    messages: list[Message] = encoding.parse_messages_from_completion_tokens(tokens, None)
    return messages


class ScriptWriter:
    """Decides the answer to a conversation and renders it as harmony tokens."""

    def __init__(
        self, encoding: HarmonyEncoding, *, remembered: int = 64, remembered_tokens: int = 16_384
    ) -> None:
        self.encoding = encoding
        self.filler = [encoding.encode(word)[0] for word in _FILLER_WORDS]
        self._worked_out = functools.lru_cache(maxsize=remembered)(self._work_out)
        self._remembered_tokens = remembered_tokens

    def _text(self, text: str) -> list[int]:
        # Its answers echo the input: a long unbroken run would cost the engine loop seconds (its square).
        tokens: list[int] = []
        for part in split_long_runs(text):
            tokens += self.encoding.encode(part, allowed_special="all")
        return tokens

    def script_for(self, prompt_token_ids: Sequence[int]) -> list[int]:
        """The answer's tokens still to come: all of it, or, when the prompt already ends with part of
        it (a worker took the response over and continues from prompt + generated), the rest."""
        return self.continuation(prompt_token_ids)[1]

    def continuation(self, prompt_token_ids: Sequence[int]) -> tuple[list[Message], list[int]]:
        """The messages the answer answers, and the answer's tokens still to come (the caller's own lists).

        Each is worked out once per prompt (the last ``remembered`` prompts): tests, demos and benches
        send the same prompts again and again, and parsing one back into messages costs the engine
        loop ~0.6-1 ms per request, which a real model does not spend. A prompt over
        ``remembered_tokens`` is worked out every time: remembered, it would hold ~40 MB per million
        tokens (its token ids and text) for as long as the worker runs."""
        prompt = tuple(prompt_token_ids)
        work_out = self._worked_out if len(prompt) <= self._remembered_tokens else self._work_out
        messages, script = work_out(prompt)
        return list(messages), list(script)

    def _work_out(self, prompt_token_ids: tuple[int, ...]) -> tuple[tuple[Message, ...], tuple[int, ...]]:
        tokens = list(prompt_token_ids)
        assistant = self.encoding.encode("assistant", allowed_special="all")
        # The assistant headers since the last message of another author, earliest first: the
        # prompt's own header, then the answer's (a later one matches a short tail spuriously).
        headers: list[int] = []
        for start in [i for i in range(len(tokens) - 1, -1, -1) if tokens[i] == START][:_CONTINUATION_DEPTH]:
            role = tokens[start + 1 : start + 1 + len(assistant)]
            if role != assistant[: len(role)]:
                break
            if len(role) == len(assistant):
                headers.insert(0, start + 1 + len(assistant))
        for header_end in headers:
            tail = tokens[header_end:]
            messages = parse_prompt(self.encoding, tokens[:header_end])
            script = self.tokens_for(messages)
            if script[: len(tail)] == tail:
                return tuple(messages), tuple(script[len(tail) :])
        if headers and (forced := self._forced_rest(tokens[:headers[0]], tokens[headers[0]:])) is not None:
            return forced
        messages = parse_prompt(self.encoding, tokens)
        return tuple(messages), tuple(self.tokens_for(messages))

    def _forced_rest(
        self, before: list[int], tail: list[int]
    ) -> tuple[tuple[Message, ...], tuple[int, ...]] | None:
        """The rest of a call whose start the worker wrote for the model (``tool_choice``:
        ``harmony/render.py`` forced_call_header), or None if ``tail`` is not one (``tail`` may go on
        into the call, as when a worker takes the response over). The call is the last user message's
        first ``call RECIPIENT ARGS`` that fits the start, else a call the start allows: the tool it
        names or the first tool of its namespace, with the simplest arguments its signature allows
        (``python``: ``1+1``; ``browser``: a search for the user's words)."""
        text = self.encoding.decode(tail)
        start = _FORCED.match(text)
        if start is None:
            return None
        messages = parse_prompt(self.encoding, before)
        users = [text_of(m) for m in messages if m.author.role == Role.USER]
        last_user = users[-1] if users else ""
        calls = [(recipient, arguments.strip()) for recipient, arguments in _CALL.findall(last_user)]
        for recipient, arguments in calls + _default_calls(start, messages, last_user):
            call = _forced_call_text(recipient, arguments)
            # The worker wrote the start as one piece of text; the model went on from its last token.
            for cut in _header_cuts(call):
                script = self._text(call[:cut]) + self._text(call[cut:]) + [CALL]
                if script[: len(tail)] == tail:
                    return tuple(messages), tuple(script[len(tail):])
        return None

    def tokens_for(self, messages: list[Message]) -> list[int]:
        user_texts = [text_of(m) for m in messages if m.author.role == Role.USER]
        last_user = user_texts[-1] if user_texts else ""
        last = messages[-1] if messages else None
        analysis = self._text(f"<|channel|>analysis<|message|>The user said: {json.dumps(last_user[:200])}.<|end|>")
        calls = _CALL.findall(last_user)
        answered = _tool_results_since_user(messages)
        if answered < len(calls):
            recipient, arguments = calls[answered]
            return analysis + self._tool_call(recipient, arguments.strip())
        quote = None
        if last is not None and last.author.role == Role.TOOL:
            quote = f"The tool {last.author.name} returned: {text_of(last)}"
        # A requested format constrains every final answer on vLLM, one after a tool result too.
        if response_format := requested_format(messages):
            return analysis + self._final(_formatted(response_format, quote or last_user))
        if quote is not None:
            return analysis + self._final(quote)
        if count := _TOKENS.search(last_user):
            return analysis + self._final_tokens(int(count.group(1)))
        return analysis + self._final(self._echo(user_texts))

    @staticmethod
    def _echo(user_texts: list[str]) -> str:
        answer = f"You said: {json.dumps(user_texts[-1] if user_texts else '')}."
        if len(user_texts) > 1:
            earlier = " ".join(f"{i}. {json.dumps(t)}" for i, t in enumerate(user_texts[:-1], start=1))
            answer += f" Earlier you said: {earlier}"
        return answer

    def _final(self, text: str) -> list[int]:
        return self._text("<|start|>assistant<|channel|>final<|message|>") + self._text(text) + [RETURN]

    def _final_tokens(self, count: int) -> list[int]:
        body = [self.filler[i % len(self.filler)] for i in range(count)]
        return self._text("<|start|>assistant<|channel|>final<|message|>") + body + [RETURN]

    def _tool_call(self, recipient: str, arguments: str) -> list[int]:
        return self._text("<|start|>assistant" + _call_text(recipient, arguments)) + [CALL]


def _call_text(recipient: str, arguments: str) -> str:
    """A call as gpt-oss writes it, after its ``<|start|>assistant``: built-ins on ``analysis``,
    the rest on ``commentary``; ``<|constrain|>json`` for JSON arguments, ``code`` for python's."""
    builtin = recipient.partition(".")[0] in BUILTIN_NAMESPACES
    channel = BUILTIN_CALL_CHANNEL if builtin else "commentary"
    constrain = " <|constrain|>json" if _is_json(arguments) else (" code" if recipient == PYTHON else "")
    return f"<|channel|>{channel} to={recipient}{constrain}<|message|>{arguments}"


def _forced_call_text(recipient: str, arguments: str) -> str:
    """A call after a forced start: a function's or MCP tool's header as ``function_call_header_rest``
    writes it (its arguments' type whatever they are), a built-in's as the model writes it."""
    namespace, _, name = recipient.partition(".")
    if namespace in BUILTIN_NAMESPACES or not name:
        return _call_text(recipient, arguments)
    return f"<|channel|>commentary to={namespace}." + function_call_header_rest(name) + arguments


def _header_cuts(call: str) -> list[int]:
    """Where a forced start can end in ``call``: after ``to=NAMESPACE.``, after the recipient, after
    ``<|message|>``."""
    recipient_at = call.index(" to=") + len(" to=")
    recipient = _RECIPIENT.match(call, recipient_at)
    recipient_end = recipient.end() if recipient else recipient_at
    cuts = [recipient_end, call.index("<|message|>") + len("<|message|>")]
    if (dot := call.find(".", recipient_at, recipient_end)) >= 0:
        cuts.insert(0, dot + 1)
    return cuts


def _default_calls(start: re.Match[str], messages: list[Message], last_user: str) -> list[tuple[str, str]]:
    """The call the model makes after a forced start when the user asked for none that fits it."""
    namespace, named = start.group(1), start.group(2)
    if namespace == PYTHON:
        return [(PYTHON, "1+1")]
    if namespace == BROWSER:
        return [(f"{BROWSER}.{named or 'search'}", json.dumps({"query": last_user[:100]}))]
    names = [named] if named else []
    first = _first_tool(messages, namespace)
    tools = text_of(messages[1]) if len(messages) > 1 and messages[1].author.role == Role.DEVELOPER else ""
    return [(f"{namespace}.{name}", _arguments(tools, namespace, name, last_user))
            for name in names + ([first] if first else [])]


def _arguments(tools: str, namespace: str, name: str, last_user: str) -> str:
    """The arguments the tool's signature asks for (``{}`` when the prompt does not declare it)."""
    arguments = arguments_of(tools, namespace, name, text=last_user[:100] or "text")
    return json.dumps(arguments if arguments is not None else {}, separators=(",", ":"), ensure_ascii=False)


def _formatted(response_format: ResponseFormat, last_user: str) -> str:
    """The JSON answer to a requested format (compact, as structured outputs are)."""
    if response_format.type == "json_object":
        value: object = {"answer": last_user}
    else:
        value = instance_of(response_format.schema, text=last_user)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _first_tool(messages: list[Message], namespace: str) -> str | None:
    """The first tool of ``namespace`` (functions, a namespace tool, an MCP server) the renderer's
    developer message offers."""
    if len(messages) < 2 or messages[1].author.role != Role.DEVELOPER:
        return None
    text = text_of(messages[1])
    start = text.find(f"namespace {namespace} {{")
    found = _FUNCTION_TYPE.search(text, start) if start >= 0 else None
    return found.group(1) if found else None


def _tool_results_since_user(messages: list[Message]) -> int:
    count = 0
    for message in reversed(messages):
        if message.author.role == Role.USER:
            break
        count += message.author.role == Role.TOOL
    return count


def _is_json(text: str) -> bool:
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


class StepClock:
    """A shared clock: each tick lets every running request emit one token.

    A request either awaits the tick (``generate``: one task woken per request and step) or follows
    the clock (``stream``: the clock's own task steps it, as vLLM's output handler feeds every running
    request of one engine step in one pass).
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.steps = 0  # ticks so far: what tests count instead of reading a wall clock
        self._tick: asyncio.Future[None] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._followers: dict[Callable[[], None], None] = {}  # in the order they came (a dict, not a set)

    def next_tick(self) -> asyncio.Future[None]:
        if self._tick is None or self._tick.done():
            self._tick = asyncio.get_running_loop().create_future()
        self._keep_ticking()
        return self._tick

    def follow(self, step: Callable[[], None]) -> None:
        """Call ``step`` at every tick from now on, until ``unfollow(step)``."""
        self._followers[step] = None
        self._keep_ticking()

    def unfollow(self, step: Callable[[], None]) -> None:
        self._followers.pop(step, None)

    def _keep_ticking(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._run())

    def _waited(self) -> bool:
        return bool(self._followers) or (self._tick is not None and not self._tick.done())

    async def _run(self) -> None:
        # Stops by itself once a step passes with nobody waiting on it.
        while self._waited():
            await asyncio.sleep(self.interval)
            if not self._waited():
                break
            self.steps += 1
            self._step_all()

    def _step_all(self) -> None:
        tick, self._tick = self._tick, None
        for step in list(self._followers):
            step()
        if tick is not None and not tick.done():
            tick.set_result(None)

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        self._step_all()  # release the waiters and followers (they see their requests aborted)


@dataclass(slots=True)
class _Request:
    aborted: asyncio.Future[None]


class _Script:
    """One request's answer, a step at a time: what the engine outputs at each of its steps.

    Like vLLM: the first token is output at once, then every ``stream_interval`` tokens; the stop token
    (``<|return|>``, ``<|call|>``, or the request's own) is output and ends it, ``max_tokens`` ends it
    with ``length``, and an answer that ran out without a stop token ends with ``stop``."""

    __slots__ = ("done", "_tokens", "_index", "_stops", "_max_tokens", "_interval", "_pending")

    def __init__(self, tokens: Sequence[int], sampling: SamplingSettings) -> None:
        self.done = False
        self._tokens = tokens
        self._index = 0
        self._stops = set(sampling.stop_token_ids) or {RETURN, CALL}
        self._max_tokens = sampling.max_tokens
        self._interval = sampling.stream_interval
        self._pending: list[int] = []  # generated, not yet output (stream_interval > 1)

    @property
    def waits(self) -> bool:
        """Whether a token is left to generate (a step to wait for); else the end is output at once."""
        return self._index < len(self._tokens)

    def step(self) -> list[EngineOutput]:
        """The outputs of one engine step (none while ``stream_interval`` holds its token back)."""
        if not self.waits:
            return [self._end("stop")]
        index, token = self._index, self._tokens[self._index]
        self._index += 1
        cached = 0 if index == 0 else None
        self._pending.append(token)
        if token in self._stops:
            return [self._end("stop", cached)]
        if index + 1 >= self._max_tokens:
            return [self._end("length", cached)]
        outputs = []
        if index == 0 or len(self._pending) >= self._interval:
            outputs.append(EngineOutput(token_ids=self._take(), cached_tokens=cached))
        if not self.waits:
            outputs.append(self._end("stop"))
        return outputs

    def aborted(self) -> EngineOutput:
        return self._end("abort")

    def _end(self, reason: FinishReason, cached: int | None = None) -> EngineOutput:
        self.done = True
        return EngineOutput(token_ids=self._take(), finished=True, finish_reason=reason, cached_tokens=cached)

    def _take(self) -> list[int]:
        pending, self._pending = self._pending, []
        return pending


def _step_followed(
    script: _Script, request: _Request, on_output: OutputSink, done: asyncio.Future[None]
) -> None:
    """One clock step of a streamed request: its outputs to ``on_output``; ``done`` once it ended (or
    failed: what ``on_output`` raised)."""
    if done.done():
        return
    try:
        for output in [script.aborted()] if request.aborted.done() else script.step():
            on_output(output)
    except Exception as exc:
        done.set_exception(exc)
        return
    if script.done:
        done.set_result(None)


class ScriptedEngine:
    """The scripted stand-in model (see the module docstring)."""

    def __init__(
        self,
        encoding: HarmonyEncoding,
        *,
        tokens_per_second: float = 0.0,
        step_interval_seconds: float = 0.0,
        context_tokens: int | None = None,
    ) -> None:
        self.context_tokens = context_tokens  # None: no limit
        self.writer = ScriptWriter(encoding)
        self.encoding = encoding
        self.delay = 1.0 / tokens_per_second if tokens_per_second > 0 else 0.0
        self.clock = StepClock(step_interval_seconds) if step_interval_seconds > 0 else None
        self._requests: dict[str, _Request] = {}

    @classmethod
    def from_settings(cls, settings: Settings, encoding: HarmonyEncoding) -> ScriptedEngine:
        return cls(
            encoding,
            tokens_per_second=settings.scripted_tokens_per_second,
            step_interval_seconds=settings.scripted_step_interval_seconds,
            context_tokens=settings.scripted_context_tokens,
        )

    async def start(self) -> None:
        return None

    async def shutdown(self) -> None:
        for request in self._requests.values():
            if not request.aborted.done():
                request.aborted.set_result(None)
        if self.clock is not None:
            self.clock.stop()

    async def abort(self, request_id: str) -> None:
        request = self._requests.get(request_id)
        if request is not None and not request.aborted.done():
            request.aborted.set_result(None)

    @property
    def running(self) -> int:
        return len(self._requests)

    async def generate(
        self, request_id: str, prompt_token_ids: Sequence[int], sampling: SamplingSettings
    ) -> AsyncIterator[EngineOutput]:
        # One generator level per token (not a nested one): this runs once per token per response.
        script = self._script(prompt_token_ids, sampling)
        request = self._register(request_id)
        try:
            while not script.done:
                if script.waits and await self._wait_turn(request):
                    yield script.aborted()
                    return
                for output in script.step():
                    yield output
        finally:
            self._requests.pop(request_id, None)

    async def stream(
        self, request_id: str, prompt_token_ids: Sequence[int], sampling: SamplingSettings, on_output: OutputSink
    ) -> None:
        """On the step clock, every running request is stepped by the clock's one task, its outputs
        handed to ``on_output`` there (as vLLM's output handler does); otherwise ``generate``'s outputs."""
        if self.clock is None:
            async for output in self.generate(request_id, prompt_token_ids, sampling):
                on_output(output)
            return
        script = self._script(prompt_token_ids, sampling)
        request = self._register(request_id)
        done = asyncio.get_running_loop().create_future()
        step = functools.partial(_step_followed, script, request, on_output, done)
        self.clock.follow(step)
        try:
            await done
        finally:
            self.clock.unfollow(step)
            self._requests.pop(request_id, None)

    def _script(self, prompt_token_ids: Sequence[int], sampling: SamplingSettings) -> _Script:
        if self.context_tokens is not None:
            check_prompt_length(prompt_token_ids, self.context_tokens)
        return _Script(self.writer.script_for(prompt_token_ids), sampling)

    def _register(self, request_id: str) -> _Request:
        request = _Request(aborted=asyncio.get_running_loop().create_future())
        self._requests[request_id] = request
        return request

    async def _wait_turn(self, request: _Request) -> bool:
        """Wait for this request's next token slot; True when it was aborted meanwhile.

        On the step clock every running request awaits the one shared tick future (a plain await:
        an ``asyncio.wait`` per token and request cost more than the rest of the step); an abort
        then takes effect at the next step, as in a continuous-batching engine.
        """
        if self.delay > 0:
            await asyncio.wait({request.aborted}, timeout=self.delay)
        if self.clock is not None:
            if not request.aborted.done():
                await self.clock.next_tick()
        elif self.delay == 0:
            await asyncio.sleep(0)
        return request.aborted.done()
