"""The harmony encoding in an API process: loaded on first use (about 0.4 s), once, off the event loop.

Only token counting needs it, so an API process that never counts never loads it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import anyio
from openai_harmony import HarmonyEncoding

from oss_responses.vocab import load_encoding


class LazyEncoding:
    def __init__(self, tiktoken_dir: Path) -> None:
        self._tiktoken_dir = tiktoken_dir
        self._encoding: HarmonyEncoding | None = None
        self._lock: asyncio.Lock | None = None  # made on the loop that uses it

    async def get(self) -> HarmonyEncoding:
        if self._encoding is not None:
            return self._encoding
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if self._encoding is None:
                self._encoding = await anyio.to_thread.run_sync(load_encoding, self._tiktoken_dir)
        return self._encoding
