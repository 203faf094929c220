"""The documents MCP server: search and fetch over a few built-in documents.

``python -m oss_responses.tools.servers.documents --port 8812 [--transport sse]``

``search`` / ``fetch`` are the tools for a plain MCP label. ``search`` / ``open`` / ``find`` have the
names and arguments of gpt-oss's built-in ``browser`` tool (``browser.search`` etc.), so a label
configured as ``browser`` (web_search_preview) can be served by this server. ``open`` and ``find``
keep no page state between calls: ``open`` takes a document id, ``find`` looks in every document.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from oss_responses.tools.servers import corpus
from oss_responses.tools.servers._cli import serve

DEFAULT_PORT = 8812
_READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True)


def _document(document_id: str) -> corpus.Document:
    document = corpus.get(document_id)
    if document is None:
        raise ToolError(f"no document with id {document_id!r}; ids come from search results")
    return document


def _numbered(document: corpus.Document, loc: int, num_lines: int) -> str:
    lines = document.text.split("\n")
    start = max(loc, 0)
    end = len(lines) if num_lines <= 0 else start + num_lines
    body = "\n".join(f"L{number}: {lines[number]}" for number in range(start, min(end, len(lines))))
    return f"[{document.id}] {document.title}\n{body}"


def build_server() -> MCPServer:
    server = MCPServer("documents", instructions="Search and read a small set of documents.")

    @server.tool(annotations=_READ_ONLY, structured_output=False)
    def search(query: str, topn: int = 5) -> str:
        """Search the documents; returns a JSON list of {id, title, url, snippet}, best match first."""
        hits = corpus.search(query, topn)
        return json.dumps([{"id": d.id, "title": d.title, "url": d.url, "snippet": corpus.snippet(d)} for d in hits])

    @server.tool(annotations=_READ_ONLY, structured_output=False)
    def fetch(id: str) -> str:
        """The full text of the document with this id."""
        document = _document(id)
        return f"# {document.title}\n\n{document.text}"

    @server.tool(annotations=_READ_ONLY, structured_output=False)
    def open(id: str, cursor: int = -1, loc: int = -1, num_lines: int = -1) -> str:
        """Open a document by id and show its numbered lines (from line loc, num_lines of them)."""
        return _numbered(_document(str(id)), loc, num_lines)

    @server.tool(annotations=_READ_ONLY, structured_output=False)
    def find(pattern: str, cursor: int = -1) -> str:
        """Lines of every document that contain the pattern, as "[id] L<n>: text"."""
        hits = corpus.find_lines(pattern)
        if not hits:
            return f"no line contains {pattern!r}"
        return "\n".join(f"[{document.id}] L{number}: {line}" for document, number, line in hits)

    return server


def main(argv: Sequence[str] | None = None) -> None:
    serve(build_server(), argv, default_port=DEFAULT_PORT)


if __name__ == "__main__":
    main()
