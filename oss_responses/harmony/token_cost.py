"""What tokenizing a prompt costs, known before tokenizing it.

harmony's tokenizer (tiktoken's, in Rust) first cuts text into pieces (a word, a run of punctuation, a
run of whitespace) and then merges each piece's bytes into tokens in time that grows with the square of
the piece's length. Ordinary text is linear (~0.2 s per MB here); one unbroken run is not: 20,000 ``x``
took 0.3 s, 50,000 took 1.7 s, 400,000 took 90 s, and 1 MB overflowed the tokenizer's stack (a panic).
Letters, punctuation and whitespace alike (a DNA sequence is one piece). And the tokenizer holds the
GIL throughout, so whatever process tokenizes stalls for all of it.

The tokenizer works on UTF-8 bytes: 32,000 unbroken Chinese characters (96 kB) took 15 s. So the cost
of a prompt is its characters plus, for each long run, its length in bytes squared over
``RUN_COST_DIVISOR`` (both in characters' worth of ordinary text): the worker and the API tokenize a
costly prompt in a child process (``prompt_tokenizer.py``), and a request whose new text holds a run
that would take more than a few seconds, or several that would together, is refused before it is
stored (``check_tokenizable``). Only what a request adds is checked: the turns and conversation items
before it were checked when they came, and a chain of them only costs tokenizing time (in the child).

A run is found without running the tokenizer's own pattern (too slow in Python on megabytes): a piece
longer than ``RUN_FLOOR`` lies inside a run of one of its classes (letters and marks; punctuation;
whitespace; and line breaks and slashes, which end a piece of punctuation: ``,,,,\r\n`` is one piece,
a CSV's empty rows are many), and such a run holds a whole aligned window of ``RUN_FLOOR / 2``
characters of its class, so only windows are tried (16 MB of prose: ~80 ms). A run of letters may be
several pieces (``camelCase`` splits): the estimate errs on the costly side.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import regex

from oss_responses.errors import BadRequest

RUN_FLOOR = 1_024  # shorter runs (in characters) cost about what their characters do
RUN_COST_DIVISOR = 256  # a run of L bytes costs about L * L / 256 characters of prose (measured)
MAX_RUN = 65_536  # bytes of UTF-8: ~3 s of tokenizing here
MAX_RUN_COST = 4 * MAX_RUN * MAX_RUN // RUN_COST_DIVISOR  # all runs together: four of the longest allowed

_WINDOW = RUN_FLOOR // 2
_CLASSES = (r"[\p{L}\p{M}]", r"[^\s\p{L}\p{N}]", r"\s", r"[\r\n/]")
_WHOLE = tuple(regex.compile(f"{c}+") for c in _CLASSES)
_HEAD = tuple(regex.compile(f"{c}*") for c in _CLASSES)
_TAIL = tuple(regex.compile(f"{c}*\\Z") for c in _CLASSES)


@dataclass(frozen=True, slots=True)
class TokenizingCost:
    chars: int
    runs: tuple[int, ...]  # the lengths in bytes of the runs of at least RUN_FLOOR characters

    @property
    def run_cost(self) -> int:
        return sum(length * length for length in self.runs) // RUN_COST_DIVISOR

    @property
    def weight(self) -> int:
        """The cost in characters' worth of ordinary text."""
        return self.chars + self.run_cost

    def __add__(self, other: TokenizingCost) -> TokenizingCost:
        return TokenizingCost(self.chars + other.chars, self.runs + other.runs)


NO_COST = TokenizingCost(0, ())


def long_runs(text: str) -> list[int]:
    """The lengths in bytes of the runs in ``text`` that may be single pieces of at least ``RUN_FLOOR``
    characters."""
    return [len(text[start:end].encode("utf-8", "surrogatepass")) for start, end in run_spans(text)]


def run_spans(text: str) -> list[tuple[int, int]]:
    """Where those runs are: (start, end), in order; runs of two classes that overlap (line breaks are
    whitespace too) are one."""
    if len(text) < RUN_FLOOR:
        return []
    classes = zip(_WHOLE, _HEAD, _TAIL, strict=True)
    spans = sorted(span for whole, head, tail in classes for span in _runs_of_class(text, whole, head, tail))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _runs_of_class(text: str, whole: Any, head: Any, tail: Any) -> Iterator[tuple[int, int]]:
    position = 0
    while position + _WINDOW <= len(text):
        if whole.fullmatch(text, position, position + _WINDOW) is None:
            position += _WINDOW
            continue
        end = head.match(text, position).end()
        start = tail.search(text, max(0, position - _WINDOW), position).start()
        if end - start >= RUN_FLOOR:
            yield start, end
        position = -(-end // _WINDOW) * _WINDOW  # the next window wholly after the run


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def cost_of(messages: Iterable[dict[str, Any]]) -> TokenizingCost:
    """The cost of tokenizing harmony message dicts (every string in them: text, tools, recipients)."""
    chars, runs = 0, []
    for text in _strings(list(messages)):
        chars += len(text)
        runs.extend(long_runs(text))
    return TokenizingCost(chars, tuple(runs))


def check_tokenizable(cost: TokenizingCost) -> None:
    """A 400 for a prompt whose runs the tokenizer would take more than a few seconds over."""
    longest = max(cost.runs, default=0)
    if longest > MAX_RUN:
        raise BadRequest(
            f"Input text has a run of {longest:,} bytes without a break (no whitespace, and no change between "
            f"letters, digits and punctuation); at most {MAX_RUN:,} bytes of UTF-8 are accepted (as many ASCII "
            f"characters, about {MAX_RUN // 3:,} Chinese): the model's tokenizer takes time that grows with the "
            "square of such a run. Break it up, with spaces or newlines.",
            param="input", code="string_above_max_length",
        )
    if cost.run_cost > MAX_RUN_COST:
        raise BadRequest(
            f"Input text has {len(cost.runs):,} runs of over {RUN_FLOOR:,} characters without a break, which "
            f"together would take the model's tokenizer as long as {cost.run_cost / (MAX_RUN_COST // 4):.1f} runs "
            f"of {MAX_RUN:,} bytes; at most 4 are accepted. Break them up, with spaces or newlines.",
            param="input", code="string_above_max_length",
        )


def split_long_runs(text: str, size: int = RUN_FLOOR) -> list[str]:
    """``text`` in parts that join back to it, each long run cut every ``size`` characters: encoded part by
    part, it decodes to the same text in linear time (though not as the tokenizer's own split of it). The
    cuts fall inside runs only, so no special token's text (``<|end|>``: letters and punctuation) is cut."""
    cuts = sorted({cut for start, end in run_spans(text) for cut in range(start + size, end, size)})
    bounds = [0, *cuts, len(text)]
    return [text[start:end] for start, end in zip(bounds, bounds[1:], strict=False)]
