"""A prompt's tokens assembled from its messages' tokens, each message rendered once per process.

harmony renders a conversation (``auto_drop_analysis`` off, as this service asks) as the concatenation
of its messages, each rendered alone with one conversation-wide option (whether a developer message
declares ``functions`` tools), then, for a completion, ``<|start|>assistant``. Yet every call pays
~0.13 ms per message before its text (harmony encodes each formatting token anew), and a continued
conversation renders its whole history again each turn: an agent's 160th response (441 messages, 72k
tokens; bench/prompt_render.py) took 139 ms here, holding the GIL, so every response running in the worker
stalled for it, turn after turn. Its messages' tokens are known from the turn before.

``MessageTokens`` keeps each rendered message's tokens, keyed by the message itself (its pickle) and that
option, evicting the least recently used past a byte budget; a prompt then renders only its new messages
(the same response: 4-5 ms, most of it naming the kept messages and copying their tokens). Rendering
what is missing is the caller's (``RenderMissing``): in this thread, or in a child process for a costly
text (``prompt_tokenizer.py``).
"""

from __future__ import annotations

import pickle
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from openai_harmony import Conversation, HarmonyEncoding, Message, RenderOptions, Role

# Each list of messages rendered with the conversation's option; one token list per message.
RenderMissing = Callable[[list[dict[str, Any]], bool], list[list[int]]]

_ENTRY_OVERHEAD = 200  # bytes of dict slot, tuple, array header and key object beyond their contents


def declares_function_tools(messages: Sequence[dict[str, Any]]) -> bool:
    """harmony's conversation-wide option: some developer content names a non-empty ``functions`` namespace."""
    for message in messages:
        for content in message.get("content") or ():
            if isinstance(content, dict) and content.get("type") == "developer_content":
                functions = (content.get("tools") or {}).get("functions")
                if functions and functions.get("tools"):
                    return True
    return False


def render_messages(
    messages: list[dict[str, Any]], function_tools: bool, encoding: HarmonyEncoding
) -> list[list[int]]:
    """Each message's tokens as harmony renders it inside a conversation with that option."""
    options = RenderOptions(conversation_has_function_tools=function_tools)
    return [list(encoding.render(Message.from_dict(message), options)) for message in messages]


def completion_start(encoding: HarmonyEncoding) -> list[int]:
    """What follows the conversation when the assistant is to write next (``<|start|>assistant``)."""
    return list(encoding.render_conversation_for_completion(Conversation.from_messages([]), Role.ASSISTANT))


class MessageTokens:
    """Rendered messages' tokens, least recently used evicted past ``max_bytes`` (0: nothing is kept).
    Safe to share between threads."""

    def __init__(self, encoding: HarmonyEncoding, max_bytes: int) -> None:
        self._encoding = encoding
        self._max_bytes = max_bytes
        self._entries: OrderedDict[tuple[bytes, bool], array[int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._completion_start = completion_start(encoding)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def tokenize(
        self, messages: list[dict[str, Any]], *, for_completion: bool, render_missing: RenderMissing | None = None
    ) -> list[int]:
        """The prompt's tokens, equal to harmony's render of the whole conversation; the messages not
        kept are rendered by ``render_missing`` (here, in this thread, by default)."""
        function_tools = declares_function_tools(messages)
        # A message's pickle names its whole value (the same bytes unpickle to one value), in a quarter of
        # json.dumps' time; equal messages pickled apart may differ (shared strings), which only misses.
        keys = [(pickle.dumps(message, protocol=5), function_tools) for message in messages]
        found: list[Sequence[int] | None] = [self._get(key) for key in keys]
        missing = [index for index, tokens in enumerate(found) if tokens is None]
        if missing:
            render = render_missing or self._render_here
            rendered = render([messages[index] for index in missing], function_tools)
            for index, fresh in zip(missing, rendered, strict=True):
                found[index] = fresh
                self._put(keys[index], fresh)
        out: list[int] = []
        for kept in found:
            assert kept is not None
            out.extend(kept)
        if for_completion:
            out.extend(self._completion_start)
        return out

    def _render_here(self, messages: list[dict[str, Any]], function_tools: bool) -> list[list[int]]:
        return render_messages(messages, function_tools, self._encoding)

    def _get(self, key: tuple[bytes, bool]) -> array[int] | None:
        with self._lock:
            tokens = self._entries.get(key)
            if tokens is not None:
                self._entries.move_to_end(key)
            return tokens

    def _put(self, key: tuple[bytes, bool], tokens: list[int]) -> None:
        size = _entry_bytes(key, len(tokens))
        if size > self._max_bytes:
            return
        packed = array("I", tokens)
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = packed
            self._bytes += size
            while self._bytes > self._max_bytes:
                old_key, old = self._entries.popitem(last=False)
                self._bytes -= _entry_bytes(old_key, len(old))


def _entry_bytes(key: tuple[bytes, bool], tokens: int) -> int:
    return len(key[0]) + 4 * tokens + _ENTRY_OVERHEAD
