"""What rendering an agent's prompt costs a worker, turn after turn, with and without kept messages.

An agent (Codex CLI, the Agents SDK) sends one response per tool step, each prompt the whole conversation
so far: long instructions and tool schemas, then every earlier message. harmony renders in Rust holding
the GIL, so whatever the render takes, every response running in that worker waits for (an engine loop
stall; ``prompt_tokenizer.py``). This builds such a conversation (a 12 kB developer message with ten
function tools, then per turn a user message, three steps of reasoning, a call and a 2 kB tool output,
and a final answer) and times the worker's tokenizer (``PromptTokenizer.tokenize_blocking``, the task
thread's call) on each step's prompt: without kept messages (``render_cache_bytes`` 0: the whole
conversation every time) and with them (the default), checking both give the same tokens.

Usage: PYTHONPATH=.:tests python bench/prompt_render.py [--turns 40]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import percentile
from openai_harmony import (
    Author,
    DeveloperContent,
    Message,
    ReasoningEffort,
    Role,
    SystemContent,
    ToolDescription,
)

from oss_responses.config import Settings
from oss_responses.prompt_tokenizer import PromptTokenizer
from oss_responses.vocab import load_encoding

WORDS = ("the file function return value import class def test error path self data list json print result "
         "config run make").split()


def text(rng: random.Random, chars: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(chars // 5))


def opening(rng: random.Random) -> list[dict[str, Any]]:
    tools = [ToolDescription.new(f"tool_{i}", text(rng, 200), parameters={
        "type": "object", "properties": {"cmd": {"type": "string", "description": text(rng, 80)}},
        "required": ["cmd"]}) for i in range(10)]
    system = SystemContent.new().with_reasoning_effort(ReasoningEffort.MEDIUM)
    system = system.with_conversation_start_date("2026-12-04")
    developer = DeveloperContent.new().with_instructions(text(rng, 12_000)).with_function_tools(tools)
    return [Message.from_role_and_content(Role.SYSTEM, system).to_dict(),
            Message.from_role_and_content(Role.DEVELOPER, developer).to_dict()]


def step(rng: random.Random) -> list[dict[str, Any]]:
    """One tool step: reasoning, a call, its output."""
    call = Message.from_role_and_content(Role.ASSISTANT, json.dumps({"cmd": text(rng, 100)}))
    output = Message.from_author_and_content(Author.new(Role.TOOL, "functions.tool_1"), text(rng, 2_000))
    return [Message.from_role_and_content(Role.ASSISTANT, text(rng, 300)).with_channel("analysis").to_dict(),
            call.with_channel("commentary").with_recipient("functions.tool_1").with_content_type("<|constrain|>json")
            .to_dict(),
            output.with_channel("commentary").with_recipient("assistant").to_dict()]


def prompts(turns: int) -> list[list[dict[str, Any]]]:
    """Every prompt the agent's responses render: one per tool step and one for each final answer."""
    rng = random.Random(1)
    messages, out = opening(rng), []
    for _ in range(turns):
        messages.append(Message.from_role_and_content(Role.USER, text(rng, 200)).to_dict())
        for _ in range(3):
            out.append(list(messages))
            messages += step(rng)
        out.append(list(messages))
        messages.append(Message.from_role_and_content(Role.ASSISTANT, text(rng, 500)).with_channel("final").to_dict())
    return out


def timed(tokenizer: PromptTokenizer, prompt: list[dict[str, Any]]) -> tuple[float, list[int]]:
    started = time.perf_counter()
    tokens = tokenizer.tokenize_blocking(prompt, for_completion=True)
    return (time.perf_counter() - started) * 1e3, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    args = parser.parse_args()
    settings = Settings()
    with tempfile.TemporaryDirectory() as folder:
        tiktoken_dir = Path(folder)
        encoding = load_encoding(tiktoken_dir)
        # Every prompt here in this thread: the child process would hide the render from the GIL, not its cost.
        whole = PromptTokenizer(encoding, tiktoken_dir, process_above_chars=10**12, cache_bytes=0)
        kept = PromptTokenizer(encoding, tiktoken_dir, process_above_chars=10**12,
                               cache_bytes=settings.render_cache_bytes)
        all_prompts = prompts(args.turns)
        rows, before, after = [], [], []
        for index, prompt in enumerate(all_prompts):
            ms_whole, tokens_whole = timed(whole, prompt)
            ms_kept, tokens_kept = timed(kept, prompt)
            assert tokens_kept == tokens_whole, f"prompt {index}: kept messages gave other tokens"
            before.append(ms_whole)
            after.append(ms_kept)
            rows.append((index, len(prompt), len(tokens_whole), ms_whole, ms_kept))
    print(f"{len(all_prompts)} prompts of an agent's {args.turns} turns (4 responses per turn), the same tokens "
          f"both ways; kept: {kept.messages.size_bytes / 1e6:.1f} MB (render_cache_bytes "
          f"{settings.render_cache_bytes / 2**20:.0f} MiB)")
    print("  response  messages  tokens   whole render   kept messages   (ms of the worker's GIL)")
    for index, messages, tokens, ms_whole, ms_kept in rows:
        if index in (0, 3, 39, 79, len(rows) - 1):
            print(f"  {index + 1:8d}  {messages:8d}  {tokens:6d}   {ms_whole:9.2f}      {ms_kept:9.2f}")
    print(f"per response: whole render p50 {percentile(before, 0.5):.2f} ms, total {sum(before) / 1e3:.2f} s; "
          f"kept messages p50 {percentile(after, 0.5):.2f} ms, total {sum(after) / 1e3:.2f} s")
    print(f"render of the last response's prompt: whole {before[-1]:.2f} ms, from kept messages {after[-1]:.2f} ms")
    print(f"agent_last_prompt_render_kept: {after[-1]:.2f} ms")


if __name__ == "__main__":
    main()
