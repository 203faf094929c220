"""gpt-oss's built-in tools (harmony namespaces ``python`` and ``browser``) and the request tool types
that select them: the one registry of those names.

OpenAI's hosted tools have no gpt-oss equivalent but these two: ``code_interpreter`` is served as
``python``, every ``web_search`` flavour as ``browser``. Their calls stream as ``mcp_call`` items to
the MCP server configured for the tool's label (see ``tools/policy.py``), which gets the call as the
model wrote it: ``python`` with the code as its ``code`` argument, ``browser.search`` /
``browser.open`` / ``browser.find`` as the MCP tools ``search`` / ``open`` / ``find``.
"""

from __future__ import annotations

from typing import Literal

from oss_responses.harmony.messages import FUNCTIONS_NAMESPACE

Builtin = Literal["python", "browser"]
PYTHON: Builtin = "python"
BROWSER: Builtin = "browser"
BUILTIN_NAMESPACES: frozenset[Builtin] = frozenset({PYTHON, BROWSER})

# The browser's actions (recipients ``browser.search`` ...); python has one recipient, ``python``.
BROWSER_ACTIONS: frozenset[str] = frozenset({"search", "open", "find"})
# Each built-in's tool names: what a tool_choice naming a tool of a label served as it may name.
BUILTIN_TOOL_NAMES: dict[Builtin, frozenset[str]] = {PYTHON: frozenset({PYTHON}), BROWSER: BROWSER_ACTIONS}
# The MCP argument a ``python`` call's code travels in (the model writes plain code, not JSON).
PYTHON_CODE_ARGUMENT = "code"
# gpt-oss writes built-in calls on the analysis channel; function and MCP calls on commentary.
BUILTIN_CALL_CHANNEL = "analysis"

# Harmony namespaces the model already knows; a request's namespace or MCP label may not take them.
RESERVED_NAMESPACES: frozenset[str] = frozenset({FUNCTIONS_NAMESPACE, PYTHON, BROWSER, "container"})

TOOL_TYPES: dict[str, Builtin] = {
    "code_interpreter": PYTHON,
    "web_search_preview": BROWSER,
    "web_search_preview_2025_03_11": BROWSER,
    "web_search": BROWSER,
    "web_search_2025_08_26": BROWSER,
}

# The MCP server labels served as built-ins unless OSS_RESPONSES_BUILTIN_TOOL_LABELS says otherwise.
DEFAULT_BUILTIN_LABELS: dict[str, Builtin] = {"code_interpreter": PYTHON, "web_search_preview": BROWSER}


def builtin_of_type(tool_type: str) -> Builtin | None:
    """The built-in namespace a request tool type selects (None for other types)."""
    return TOOL_TYPES.get(tool_type)
