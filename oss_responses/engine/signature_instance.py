"""Arguments that fit a function as the model sees it: the TypeScript signature harmony renders from
the function's JSON schema (``type get_weather = (_: { city: string, unit?: "c" | "f" }) => any;``).

The scripted engine reads only the prompt, so this is all it knows of a function's parameters when a
``tool_choice`` forces a call and the user's words name no arguments. Harmony's rendering loses part of
the schema (integers are ``number``, ``$ref`` and ``anyOf`` are ``any``, bounds are gone), so the value is
the simplest one the signature allows: every required field and no optional one, a union's first member
(that is not ``null``), the given text for a string, ``0``, ``false``, ``[]``, and ``null`` for ``any``.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(
    r'\s*(?://[^\n]*|"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|[A-Za-z_$][\w$-]*|\[\]|=>|[{}()<>\[\]:;,?|&=])'
)


class SignatureError(ValueError):
    """The signature is not one this reader knows."""


def arguments_of(developer_text: str, namespace: str, name: str, *, text: str = "text") -> dict[str, Any] | None:
    """Arguments for ``namespace.name`` as the developer message declares it, or None when it is not
    declared there, or declared in a form this reader does not know."""
    start = developer_text.find(f"namespace {namespace} {{")
    if start < 0:
        return None
    found = re.compile(rf"^type {re.escape(name)} = \(", re.MULTILINE).search(developer_text, start)
    if found is None:
        return None
    try:
        reader = _Reader(developer_text, found.end(), text)
        return reader.parameters()
    except (SignatureError, IndexError):
        return None


class _Reader:
    def __init__(self, source: str, at: int, text: str) -> None:
        self.tokens = _tokens(source, at)
        self.at = 0
        self.text = text

    def parameters(self) -> dict[str, Any]:
        """After ``(``: ``)`` (no parameters) or ``_: {...})``."""
        if self._peek() == ")":
            return {}
        self._expect("_")
        self._expect(":")
        value = self._type()
        self._expect(")")
        if not isinstance(value, dict):
            raise SignatureError("the parameters are not an object")
        return value

    def _type(self) -> Any:
        first = self._array_of(self._primary())
        while self._peek() == "|":  # a union: its first member that is not null
            self._next()
            member = self._array_of(self._primary())
            if first is None:
                first = member
        return first

    def _array_of(self, value: Any) -> Any:
        while self._peek() == "[]":
            self._next()
            value = []
        return value

    def _primary(self) -> Any:
        token = self._next()
        if token == "{":
            return self._object()
        if token == "(":
            value = self._type()
            self._expect(")")
            return value
        if token.startswith('"'):
            return token[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        if re.fullmatch(r"-?\d+(?:\.\d+)?", token):
            return float(token) if "." in token else int(token)
        if token == "Array" and self._peek() == "<":
            self._skip_generic()
            return []
        return self._named(token)

    def _named(self, token: str) -> Any:
        simple = {"string": self.text, "number": 0, "boolean": False, "true": True, "false": False,
                  "null": None, "any": None, "unknown": None, "object": {}}
        if token not in simple:
            raise SignatureError(f"unknown type {token!r}")
        return simple[token]

    def _object(self) -> dict[str, Any]:
        value: dict[str, Any] = {}
        while (token := self._next()) != "}":
            if token in {",", ";"}:
                continue
            optional = self._peek() == "?"
            if optional:
                self._next()
            self._expect(":")
            field = self._type()
            if not optional:
                value[token.strip('"')] = field
        return value

    def _skip_generic(self) -> None:
        depth = 0
        while True:
            token = self._next()
            depth += {"<": 1, ">": -1}.get(token, 0)
            if depth == 0:
                return

    def _peek(self) -> str:
        return self.tokens[self.at]

    def _next(self) -> str:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def _expect(self, wanted: str) -> None:
        if (token := self._next()) != wanted:
            raise SignatureError(f"expected {wanted!r}, found {token!r}")


def _tokens(source: str, at: int) -> list[str]:
    """The signature's tokens from ``at`` to its ``=>`` (comments dropped)."""
    tokens: list[str] = []
    while at < len(source):
        match = _TOKEN.match(source, at)
        if match is None:
            raise SignatureError(f"unreadable text at {source[at:at + 20]!r}")
        at = match.end()
        token = match.group().strip()
        if token == "=>":
            return tokens
        if not token.startswith("//"):
            tokens.append(token)
    raise SignatureError("the signature does not end")
