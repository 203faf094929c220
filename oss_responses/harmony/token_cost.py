"""What tokenizing a prompt costs, known before tokenizing it.

harmony's tokenizer (tiktoken's, in Rust) first cuts text into pieces (a word, a run of punctuation, a
run of whitespace) and then merges each piece's bytes into tokens in time that grows with the square of
the piece's length. Ordinary text is linear (~0.2 s per MB here); one unbroken run is not: 20,000 ``x``
took 0.3 s, 50,000 took 1.7 s, 400,000 took 90 s, and 1 MB overflowed the tokenizer's stack (a panic).
Letters, punctuation and whitespace alike (a DNA sequence is one piece). And the tokenizer holds the
GIL throughout, so whatever process tokenizes stalls for all of it.

So the cost of a prompt is its characters plus, for each long run, its length squared over
``RUN_COST_DIVISOR`` (both in characters' worth of ordinary text): the worker and the API tokenize a
costly prompt in a child process (``prompt_tokenizer.py``), and a request whose runs cost more than a
few seconds is refused before it is stored (``check_tokenizable``).

A run is found without running the tokenizer's own pattern (too slow in Python on megabytes): a piece
longer than ``RUN_FLOOR`` lies inside a run of one of three classes (letters and marks; punctuation
and line breaks; whitespace), and such a run holds a whole aligned window of ``RUN_FLOOR / 2``
characters of its class, so only windows are tried (16 MB of prose: ~80 ms). A run of letters may be
several pieces (``camelCase`` splits): the estimate errs on the costly side.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import regex

from oss_responses.errors import BadRequest

RUN_FLOOR = 1_024  # shorter runs cost about what their characters do
RUN_COST_DIVISOR = 256  # a run of L characters costs about L * L / 256 characters of prose (measured)
MAX_RUN = 65_536  # ~3 s of tokenizing here
MAX_RUN_COST = 4 * MAX_RUN * MAX_RUN // RUN_COST_DIVISOR  # all runs together: four of the longest allowed

_WINDOW = RUN_FLOOR // 2
_CLASSES = (r"[\p{L}\p{M}]", r"(?:[^\s\p{L}\p{N}]|[\r\n])", r"\s")
_WHOLE = tuple(regex.compile(f"{c}+") for c in _CLASSES)
_HEAD = tuple(regex.compile(f"{c}*") for c in _CLASSES)
_TAIL = tuple(regex.compile(f"{c}*\\Z") for c in _CLASSES)


@dataclass(frozen=True, slots=True)
class TokenizingCost:
    chars: int
    runs: tuple[int, ...]  # the lengths of the runs of at least RUN_FLOOR characters

    @property
    def run_cost(self) -> int:
        return sum(length * length for length in self.runs) // RUN_COST_DIVISOR

    @property
    def weight(self) -> int:
        """The cost in characters' worth of ordinary text."""
        return self.chars + self.run_cost


NO_COST = TokenizingCost(0, ())


def long_runs(text: str) -> list[int]:
    """The lengths of the runs in ``text`` that may be single pieces of at least ``RUN_FLOOR`` characters."""
    return [end - start for start, end in run_spans(text)]


def run_spans(text: str) -> list[tuple[int, int]]:
    """Where those runs are: (start, end) (a run of line breaks may be found twice, as punctuation's and
    as whitespace's)."""
    if len(text) < RUN_FLOOR:
        return []
    return [span for classes in zip(_WHOLE, _HEAD, _TAIL, strict=True) for span in _runs_of_class(text, *classes)]


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
            f"Input text has a run of {longest:,} characters without a break (no whitespace, and no change "
            f"between letters, digits and punctuation); at most {MAX_RUN:,} are accepted: the model's tokenizer "
            "takes time that grows with the square of such a run. Break it up, with spaces or newlines.",
            param="input", code="string_above_max_length",
        )
    if cost.run_cost > MAX_RUN_COST:
        raise BadRequest(
            f"Input text has {len(cost.runs):,} runs of over {RUN_FLOOR:,} characters without a break, which "
            f"together would take the model's tokenizer as long as {cost.run_cost / (MAX_RUN_COST // 4):.1f} runs "
            f"of {MAX_RUN:,} characters; at most 4 are accepted. Break them up, with spaces or newlines.",
            param="input", code="string_above_max_length",
        )


def split_long_runs(text: str, size: int = RUN_FLOOR) -> list[str]:
    """``text`` in parts that join back to it, each long run cut every ``size`` characters: encoded part by
    part, it decodes to the same text in linear time (though not as the tokenizer's own split of it). The
    cuts fall inside runs only, so no special token's text (``<|end|>``: letters and punctuation) is cut."""
    cuts = sorted({cut for start, end in run_spans(text) for cut in range(start + size, end, size)})
    bounds = [0, *cuts, len(text)]
    return [text[start:end] for start, end in zip(bounds, bounds[1:], strict=False)]
