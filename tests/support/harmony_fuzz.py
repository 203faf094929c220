"""Hostile model output for the translator: token scripts drawn by hypothesis, run as the worker runs them.

A script is the tokens a model generates over a whole response (across tool turns), where the engine's
chunks are cut, and how generation ends (on its own, ``max_output_tokens``, a cancel). ``run_script``
plays the worker's part (``workers/generation.py``): an engine call ends at a stop token (``<|call|>``,
``<|return|>``, ``<|endoftext|>``), the budget or the script's end; a tool call the response answers
itself is answered (output or error) and its continuation appended; invalid harmony halts the engine
and the response fails. The tokens mix harmony's special tokens in any order, headers with unknown
channels and recipients (unknown functions, namespaces, tools needing approval, built-ins), invalid
JSON, empty messages, multi-byte characters split across tokens and lone bytes of such characters.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from functools import cache
from typing import Literal

from hypothesis import strategies as st
from openai_harmony import HarmonyEncoding

from oss_responses.harmony.hosted_items import HostedCalls
from oss_responses.harmony.translator import GENERATION_ENDS, ResponseTranslator, opening_events
from support import TIKTOKEN_DIR
from support.harmony_transcripts import Run, make_response

INPUT_TOKENS = 50
CACHED_TOKENS = 3
LABELS = {"python": "code_interpreter", "calc": "calc", "browser": "web_search"}
MARKUP = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>",
          "<|endoftext|>", "<|startoftext|>", "<|reserved_200000|>", "<|reserved_201087|>")
CHANNELS = ("analysis", "commentary", "final") * 3 + ("bogus", "")
RECIPIENTS = ("", " to=functions.get_weather", " to=functions.nope", " to=agents.spawn", " to=calc.add",
              " to=calc.secret", " to=python", " to=browser.search", " to=browser.open", " to=nowhere.tool", " to=")
CONTENT_TYPES = ("", " <|constrain|>json", " json")
# Whole strings: the multi-byte ones split into tokens of partial UTF-8 (🦄 is 3 tokens, 𝕏 too).
TEXTS = ("hello", '{"city": "Paris"}', '{"city": ', "}", "not json", "2+2", "\n", "a🦄b", "你好世界", "𝕏",
         "🧑\u200d🚀", "é", "<|end|>")
# Mostly harmony as gpt-oss writes it (a recipient also in the role's place), and the ends gpt-oss drops.
STARTS = ("<|start|>assistant",) * 4 + ("<|start|>assistant to=functions.get_weather",
                                        "<|start|>assistant to=calc.secret", "")
ENDS = ("<|end|>",) * 6 + ("<|call|>", "<|return|>", "")
PROMPT_END = "<|start|>assistant"  # the prompt ends with it: the model's first message does not write it

Stop = tuple[Literal["stop", "length", "abort"], int]


@dataclass(frozen=True)
class Setup:
    """What the request offers: the translator's options."""

    max_tool_calls: int | None = None
    offered_functions: frozenset[str] | None = None
    hosted_builtins: frozenset[str] = frozenset()
    approval: bool = False  # calc.secret needs approval
    seal: bool = False
    background: bool = False


@dataclass(frozen=True)
class Script:
    tokens: tuple[int, ...]
    cuts: frozenset[int] = frozenset()  # chunk boundaries, as positions in the generated tokens
    stop: Stop = ("stop", 0)  # "length" / "abort": after that many generated tokens
    tool_errors: tuple[bool, ...] = ()  # per answered call: the tool failed


@cache
def lone_byte_tokens() -> tuple[int, ...]:
    """o200k's tokens that are one byte of a multi-byte UTF-8 character (0x80-0xFF)."""
    ranks = []
    for line in (TIKTOKEN_DIR / "o200k_base.tiktoken").read_text().splitlines():
        piece, rank = line.split()
        raw = base64.b64decode(piece)
        if len(raw) == 1 and raw[0] >= 0x80:
            ranks.append(int(rank))
    return tuple(ranks)


def _markup(encoding: HarmonyEncoding, text: str) -> list[int]:
    return encoding.encode(text, allowed_special="all")


def _plain(encoding: HarmonyEncoding, text: str) -> list[int]:
    return encoding.encode(text, disallowed_special=())


def messages(encoding: HarmonyEncoding) -> st.SearchStrategy[list[int]]:
    """A message with any start, a header of any channel, recipient and type, any text, and any ending."""
    return st.builds(
        lambda start, channel, recipient, kind, texts, end: (
            _markup(encoding, start + "<|channel|>" + channel + recipient + kind + "<|message|>")
            + [token for text in texts for token in _plain(encoding, text)]
            + _markup(encoding, end)
        ),
        st.sampled_from(STARTS), st.sampled_from(CHANNELS), st.sampled_from(RECIPIENTS),
        st.sampled_from(CONTENT_TYPES), st.lists(st.sampled_from(TEXTS), max_size=4), st.sampled_from(ENDS),
    )


def stray_tokens(encoding: HarmonyEncoding) -> st.SearchStrategy[list[int]]:
    """One piece out of place: a special token, a header word, a text, a lone byte."""
    words = ("assistant", "user", *sorted(set(CHANNELS)), *RECIPIENTS, *CONTENT_TYPES)
    return st.one_of(
        st.sampled_from(MARKUP).map(lambda text: _markup(encoding, text)),
        st.sampled_from(words + TEXTS).map(lambda text: _plain(encoding, text)),
        st.sampled_from(lone_byte_tokens()).map(lambda token: [token]),
    )


def stops() -> st.SearchStrategy[Stop]:
    return st.one_of(
        st.just(("stop", 0)), st.tuples(st.sampled_from(["length", "abort"]), st.integers(0, 80))
    )  # type: ignore[return-value]


def setups() -> st.SearchStrategy[Setup]:
    return st.builds(
        Setup,
        max_tool_calls=st.sampled_from([None, 0, 1, 2]),
        offered_functions=st.sampled_from([None, frozenset({"functions.get_weather", "agents.spawn"})]),
        hosted_builtins=st.sampled_from([frozenset(), frozenset({"browser", "python"})]),
        approval=st.booleans(), seal=st.booleans(), background=st.booleans(),
    )


Edit = tuple[Literal["insert", "delete"], int, list[int]]


def hostile_scripts(encoding: HarmonyEncoding) -> st.SearchStrategy[Script]:
    """Messages, then a few edits: stray pieces inserted anywhere, tokens deleted (a dropped ``<|end|>``)."""
    edit = st.tuples(st.sampled_from(["insert", "delete"]), st.integers(0, 200), stray_tokens(encoding))
    return st.builds(
        lambda parts, edits, cuts, stop, errors: Script(_after_prompt(encoding, parts, edits), cuts, stop, errors),
        st.lists(messages(encoding), max_size=6), st.lists(edit, max_size=3),
        st.frozensets(st.integers(0, 100), max_size=12), stops(), st.lists(st.booleans(), max_size=3).map(tuple),
    )


def _after_prompt(encoding: HarmonyEncoding, parts: list[list[int]], edits: list[Edit]) -> tuple[int, ...]:
    tokens = [token for part in parts for token in part]
    for kind, at, piece in edits:
        at %= len(tokens) + 1
        tokens[at:at + (kind == "delete")] = piece if kind == "insert" else []
    prompt_end = _markup(encoding, PROMPT_END)
    return tuple(tokens[len(prompt_end):] if tokens[: len(prompt_end)] == prompt_end else tokens)


def well_formed(encoding: HarmonyEncoding, parts: list[tuple[str, str, list[str]]]) -> tuple[int, ...]:
    """Whole messages (channel, recipient, texts), each started and ended as harmony asks; the first's
    ``<|start|>assistant`` is the prompt's."""
    tokens: list[int] = []
    for channel, recipient, texts in parts:
        end = "<|call|>" if recipient else "<|end|>"
        tokens += _markup(encoding, f"<|start|>assistant<|channel|>{channel}{recipient}<|message|>")
        tokens += _plain(encoding, "".join(texts)) + _markup(encoding, end)
    return tuple(tokens[len(_markup(encoding, PROMPT_END)):])


def well_formed_parts() -> st.SearchStrategy[list[tuple[str, str, list[str]]]]:
    clean = [text for text in TEXTS if text != "<|end|>"]
    recipients = ["", " to=functions.get_weather", " to=calc.add", " to=python", " to=browser.search"]
    return st.lists(
        st.tuples(st.sampled_from(["analysis", "commentary", "final"]), st.sampled_from(recipients),
                  st.lists(st.sampled_from(clean), max_size=5)),
        min_size=1, max_size=5,
    )


def new_translator(encoding: HarmonyEncoding, setup: Setup) -> tuple[ResponseTranslator, list]:
    response = make_response(setup.background)
    events = opening_events(response)
    translator = ResponseTranslator(
        response, encoding=encoding, first_sequence_number=len(events), mcp_labels=LABELS, input_tokens=INPUT_TOKENS,
        approval_required=(lambda label, tool: tool == "secret") if setup.approval else None,
        max_tool_calls=setup.max_tool_calls, function_namespaces=frozenset({"agents"}),
        offered_functions=setup.offered_functions, hosted_builtins=setup.hosted_builtins,
        hosted_calls=HostedCalls(code_outputs=True, search_sources=True),
        seal=json.dumps if setup.seal else None, id_seed="fuzz",
    )
    return translator, events


def run_script(encoding: HarmonyEncoding, setup: Setup, script: Script) -> Run:
    translator, events = new_translator(encoding, setup)
    run = Run(events, translator)
    events += translator.start()
    tokens, errors = list(script.tokens), list(script.tool_errors)
    reason, limit = script.stop
    budget = limit if reason != "stop" else len(tokens)
    while True:
        call, reason_now = _engine_call(tokens, len(run.generated), budget, reason)
        _feed(run, call, script.cuts)
        if translator.halted:  # invalid harmony: the worker aborts the engine, then fails the response
            events += translator.fail("The engine aborted the generation.")
            return run
        if reason_now != "stop":
            finish: Literal["length", "abort"] = "length" if reason_now == "length" else "abort"
            events += translator.finish(finish, cached_tokens=CACHED_TOKENS)
            return run
        pending = translator.pending_tool_call
        if pending is None or pending.kind == "function" or not tokens:
            events += translator.finish("stop", cached_tokens=CACHED_TOKENS)
            return run
        failed = errors.pop() if errors else False
        events += translator.feed_tool_result(None if failed else "result 🦄", "boom" if failed else None)
        run.continuations.append(translator.continuation_token_ids())


def _engine_call(tokens: list[int], generated: int, budget: int, reason: str) -> tuple[list[int], str]:
    """The tokens of one engine call, taken from ``tokens``, and why it ended."""
    call: list[int] = []
    while tokens:
        if generated + len(call) >= budget:
            return call, reason
        call.append(tokens.pop(0))
        if call[-1] in GENERATION_ENDS:
            return call, "stop"
    return call, reason if generated + len(call) >= budget else "stop"


def _feed(run: Run, call: list[int], cuts: frozenset[int]) -> None:
    start, base = 0, len(run.generated)
    for end in range(1, len(call) + 1):
        if end == len(call) or base + end in cuts:
            run.events += run.translator.feed(call[start:end])
            run.generated += call[start:end]
            start = end
            if run.translator.halted:  # the engine's later outputs never come
                return
