"""``oss-responses doctor``: checks what the service needs at run time and says what is wrong.

Each check is a small function of the settings yielding :class:`CheckResult` lines (ok / warn /
FAIL with what to do). Checks only read: they never migrate, unpack or write, so the doctor is safe
to run against production. The list of them is :data:`oss_responses.doctor.checks.CHECKS`, not imported
here: some checks import the engine's and the MCP client's modules (~2.8 s), and the commands that ask
only :func:`oss_responses.doctor.stores.database_problem` (``keys``, ``webhooks``) must not pay for them.
"""

from __future__ import annotations

from oss_responses.doctor.report import CheckResult, run_checks

__all__ = ["CheckResult", "run_checks"]
