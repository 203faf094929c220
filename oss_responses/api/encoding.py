"""The harmony encoding in an API process: loaded on first use (about 0.4 s), once, off the event loop.

Only token counting needs it, so an API process that never counts never loads it. A costly prompt is
tokenised in a child process (``prompt_tokenizer.py``): in a thread, harmony's GIL hold would stall
every stream the process relays.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import anyio

from oss_responses.prompt_tokenizer import PromptTokenizer
from oss_responses.vocab import load_encoding


class LazyEncoding:
    def __init__(self, tiktoken_dir: Path, *, process_above_chars: int, cache_bytes: int = 0) -> None:
        self._tiktoken_dir = tiktoken_dir
        self._process_above_chars = process_above_chars
        self._cache_bytes = cache_bytes
        self._tokenizer: PromptTokenizer | None = None
        self._lock: asyncio.Lock | None = None  # made on the loop that uses it

    async def tokenizer(self) -> PromptTokenizer:
        if self._tokenizer is not None:
            return self._tokenizer
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if self._tokenizer is None:
                encoding = await anyio.to_thread.run_sync(load_encoding, self._tiktoken_dir)
                self._tokenizer = PromptTokenizer(encoding, self._tiktoken_dir,
                                                  process_above_chars=self._process_above_chars,
                                                  cache_bytes=self._cache_bytes)
        return self._tokenizer

    async def aclose(self) -> None:
        """Its child process, if it started one, is stopped (off the loop: it may be tokenising)."""
        if self._tokenizer is not None:
            await anyio.to_thread.run_sync(self._tokenizer.close)
