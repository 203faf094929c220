"""Ids of responses, items and calls: an OpenAI-style prefix plus random hex.

``resp_`` responses, ``msg_`` messages, ``rs_`` reasoning, ``fc_`` function-call items,
``call_`` function-call call ids, ``mcp_`` MCP-call items, ``mcpl_`` MCP tool lists,
``mcpr_`` MCP approval requests.
"""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    """``prefix_`` + 48 random hex digits (what OpenAI's ids look like, near enough)."""
    return f"{prefix}_{secrets.token_hex(24)}"


def response_id() -> str:
    return new_id("resp")


def message_id() -> str:
    return new_id("msg")


def reasoning_id() -> str:
    return new_id("rs")


def function_call_item_id() -> str:
    return new_id("fc")


def call_id() -> str:
    return new_id("call")


def mcp_call_id() -> str:
    return new_id("mcp")


def mcp_list_tools_id() -> str:
    return new_id("mcpl")


def mcp_approval_request_id() -> str:
    return new_id("mcpr")
