"""A response's statuses and the events that end its stream: the one home of these sets.

Plain constants, no I/O: storage, the API, the workers and the pure harmony core all import them.
(Migrations keep their own frozen copy: a migration must not change when the application does.)
"""

from __future__ import annotations

from typing import Literal, get_args

Status = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
TerminalStatus = Literal["completed", "incomplete", "failed", "cancelled"]

STATUSES: tuple[Status, ...] = get_args(Status)
ACTIVE_STATUSES: tuple[Status, ...] = ("queued", "in_progress")
TERMINAL_STATUSES: tuple[TerminalStatus, ...] = get_args(TerminalStatus)

# The events that end a response's story in its stream (a cancel ends it with the end marker alone).
TERMINAL_EVENT_TYPES = frozenset({"response.completed", "response.failed", "response.incomplete"})

# Why a generation ended, as engines report it and the translator reads it: "length" is the token
# budget (the response ends incomplete), "abort" a stop asked for (cancel, lost lease, shutdown).
FinishReason = Literal["stop", "length", "abort"]

# The Celery task that runs a response: sent by name by the API (a producer only) and by workers.
RUN_RESPONSE_TASK = "oss_responses.run_response"
