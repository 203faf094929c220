"""Harmony messages as plain dicts (the shape of openai_harmony ``Message.to_dict()``).

The turn's messages are stored as JSON and replayed verbatim by later turns, so they are built
here as dicts once, in the exact shape ``Message.from_dict`` reads back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FUNCTIONS_NAMESPACE = "functions"


def qualified_function_name(namespace: str | None, name: str) -> str:
    """``name`` for the ``functions`` namespace, ``namespace.name`` for a namespace tool's function.

    Function names cannot hold a dot (OpenAI: ``^[a-zA-Z0-9_-]+$``), so the form is unambiguous.
    """
    return f"{namespace}.{name}" if namespace and namespace != FUNCTIONS_NAMESPACE else name


def function_recipient(qualified_name: str) -> str:
    """The harmony recipient of a function call named by :func:`qualified_function_name`."""
    return qualified_name if "." in qualified_name else f"{FUNCTIONS_NAMESPACE}.{qualified_name}"


def text_message(
    role: str,
    text: str,
    *,
    name: str | None = None,
    channel: str | None = None,
    recipient: str | None = None,
    content_type: str | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "name": name, "content": [{"type": "text", "text": text}]}
    if channel is not None:
        message["channel"] = channel
    if recipient is not None:
        message["recipient"] = recipient
    if content_type is not None:
        message["content_type"] = content_type
    return message


def tool_result_message(recipient: str, text: str, channel: str | None) -> dict[str, Any]:
    """The tool's answer to an assistant message addressed to ``recipient`` (gpt-oss's format)."""
    return text_message("tool", text, name=recipient, channel=channel, recipient="assistant")


DECLINED = "The user declined this tool call; it was not run."


def declined_message(recipient: str, reason: str | None, channel: str | None) -> dict[str, Any]:
    """What the model reads in place of a call's result when the user declined to approve it."""
    return tool_result_message(recipient, DECLINED + (f" Reason: {reason}" if reason else ""), channel)


@dataclass(frozen=True, slots=True)
class Recipient:
    """A tool address: ``functions.get_weather`` → (functions, get_weather); ``python`` → (python, python)."""

    namespace: str
    tool: str

    @classmethod
    def parse(cls, recipient: str) -> Recipient:
        namespace, dot, tool = recipient.partition(".")
        return cls(namespace, tool if dot else namespace)

    @staticmethod
    def address(namespace: str, tool: str) -> str:
        return namespace if tool == namespace else f"{namespace}.{tool}"

