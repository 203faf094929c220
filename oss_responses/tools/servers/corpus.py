"""The documents the documents server serves, and plain-word search over them."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str
    url: str  # where what the text summarises is published: a search result's source


DOCUMENTS: tuple[Document, ...] = (
    Document(
        "responses-api",
        "The Responses API",
        "The Responses API creates model responses from text and tool inputs. A response may run in the\n"
        "background: it is queued, then in progress, then completed, failed, cancelled or incomplete.\n"
        "Streaming clients receive server-sent events and can resume a stream with starting_after.",
        "https://platform.openai.com/docs/api-reference/responses",
    ),
    Document(
        "mcp",
        "Model Context Protocol",
        "The Model Context Protocol (MCP) connects models to tools. A server lists its tools with a name,\n"
        "a description and a JSON schema for the arguments; a client calls a tool and receives content.\n"
        "Remote servers speak Streamable HTTP; older servers use server-sent events (SSE).",
        "https://modelcontextprotocol.io",
    ),
    Document(
        "harmony",
        "The harmony format",
        "gpt-oss models were trained on the harmony response format. Messages carry a role, a channel\n"
        "(analysis, commentary or final) and an optional recipient. Tool calls end with <|call|>; the\n"
        "final answer ends with <|return|>. The built-in tools are python and browser.",
        "https://github.com/openai/harmony",
    ),
    Document(
        "gpt-oss",
        "gpt-oss models",
        "gpt-oss-20b and gpt-oss-120b are open-weight reasoning models. They support three reasoning\n"
        "efforts (low, medium, high), function calling, and the built-in browser and python tools.",
        "https://github.com/openai/gpt-oss",
    ),
)

_BY_ID = {document.id: document for document in DOCUMENTS}
_WORD = re.compile(r"[a-z0-9]+")


def get(document_id: str) -> Document | None:
    return _BY_ID.get(document_id)


def search(query: str, topn: int) -> list[Document]:
    """Documents sharing words with the query, most shared words first."""
    words = set(_WORD.findall(query.lower()))
    scored = [(len(words & set(_WORD.findall(f"{d.title} {d.text}".lower()))), d) for d in DOCUMENTS]
    matches = [(score, document) for score, document in scored if score > 0]
    matches.sort(key=lambda pair: (-pair[0], pair[1].id))
    return [document for _, document in matches[: max(topn, 0)]]


def snippet(document: Document, length: int = 120) -> str:
    first_line = document.text.split("\n", 1)[0]
    return first_line if len(first_line) <= length else first_line[: length - 1] + "…"


def find_lines(pattern: str) -> list[tuple[Document, int, str]]:
    """Every line (document, line number, text) containing the pattern, case-insensitively."""
    needle = pattern.lower()
    return [
        (document, number, line)
        for document in DOCUMENTS
        for number, line in enumerate(document.text.split("\n"))
        if needle and needle in line.lower()
    ]
