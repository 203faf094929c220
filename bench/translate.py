"""Translation throughput: token ids → openai events → JSON bytes, one token per feed (one engine step).

A mixed transcript of about 100,000 tokens (reasoning + final answers, function calls, MCP python
calls with their results) is translated three times: harmony parsing alone, parsing plus event
building, and the whole path with ``event.model_dump_json()``. Prints the per-token split and, last,
the headline ``translate: N tokens/s``.

    PYTHONPATH=.:tests python bench/translate.py
"""

from __future__ import annotations

import time

from openai.types.responses import Response
from openai_harmony import Role, StreamableParser
from support import TIKTOKEN_DIR

from oss_responses.harmony.translator import ResponseTranslator
from oss_responses.vocab import load_encoding

TARGET_TOKENS = 100_000
PROSE = (
    "The quick brown fox considers the problem carefully, weighing each option before it jumps; "
    "numbers like 123*456 = 56088 and words like café, naïve and 日本語 keep the tokenizer honest. "
)
RESPONSES = [
    [f"<|channel|>analysis<|message|>{PROSE * 6}<|end|>"
     f"<|start|>assistant<|channel|>final<|message|>{PROSE * 4}<|return|>"],
    [f"<|channel|>analysis<|message|>{PROSE * 3}<|end|>"
     "<|start|>assistant<|channel|>commentary to=functions.get_weather "
     '<|constrain|>json<|message|>{"city": "Paris", "unit": "celsius"}<|call|>'],
    [f"<|channel|>analysis<|message|>{PROSE * 2}<|end|><|start|>assistant<|channel|>analysis to=python code<|message|>"
     "print(123*456)\n<|call|>",
     f"<|channel|>analysis<|message|>{PROSE}<|end|><|start|>assistant<|channel|>final<|message|>{PROSE * 3}<|return|>"],
]


def _response() -> Response:
    return Response.model_validate({
        "id": "resp_bench", "object": "response", "created_at": time.time(), "model": "gpt-oss-20b", "output": [],
        "tool_choice": "auto", "tools": [], "parallel_tool_calls": True, "status": "in_progress",
    })


def transcript(encoding) -> list[list[list[int]]]:
    """Responses, each a list of engine calls' token lists, adding up to about TARGET_TOKENS."""
    encoded = [[encoding.encode(part, allowed_special="all") for part in parts] for parts in RESPONSES]
    out, total, i = [], 0, 0
    while total < TARGET_TOKENS:
        out.append(encoded[i % len(encoded)])
        total += sum(map(len, encoded[i % len(encoded)]))
        i += 1
    return out


def parse_only(encoding, responses) -> None:
    for calls in responses:
        for tokens in calls:
            process = StreamableParser(encoding, Role.ASSISTANT)._inner.process
            for token in tokens:
                process(token)


def translate(encoding, responses, serialise: bool) -> int:
    size = 0
    for calls in responses:
        translator = ResponseTranslator(
            _response(), encoding=encoding, first_sequence_number=1, mcp_labels={"python": "code_interpreter"}
        )
        events = translator.start()
        for index, tokens in enumerate(calls):
            for token in tokens:
                events += translator.feed((token,))
                if serialise:
                    size += sum(len(event.model_dump_json()) for event in events)
                events = []
            if index + 1 < len(calls):
                events += translator.feed_tool_result("56088\n", None)
                translator.continuation_token_ids()
        events += translator.finish("stop")
        if serialise:
            size += sum(len(event.model_dump_json()) for event in events)
    return size


def _time(fn) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    encoding = load_encoding(TIKTOKEN_DIR)
    responses = transcript(encoding)
    tokens = sum(len(t) for calls in responses for t in calls)
    parse = _time(lambda: parse_only(encoding, responses))
    build = _time(lambda: translate(encoding, responses, serialise=False))
    full = _time(lambda: translate(encoding, responses, serialise=True))
    size = translate(encoding, responses, serialise=True)
    us = 1e6 / tokens
    print(f"transcript: {tokens} tokens in {len(responses)} responses, {size / 1e6:.1f} MB of event JSON")
    print(f"parser:        {parse * us:6.2f} us/token")
    print(f"event build:   {(build - parse) * us:6.2f} us/token")
    print(f"serialisation: {(full - build) * us:6.2f} us/token")
    print(f"total:         {full * us:6.2f} us/token")
    print(f"translate: {tokens / full:,.0f} tokens/s".replace(",", ""))


if __name__ == "__main__":
    main()
