"""A check's result, its printed line, and running every check."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TextIO

from oss_responses.config import Settings

Status = Literal["ok", "warn", "FAIL"]


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    detail: str

    @property
    def line(self) -> str:
        return f"{self.status:<4} {self.name}: {self.detail}"


Check = Callable[[Settings], Iterable[CheckResult]]


def run_checks(settings: Settings, checks: Sequence[Check], out: TextIO) -> bool:
    """Print one line per result as it comes; True when nothing FAILed."""
    healthy = True
    for check in checks:
        try:
            results = list(check(settings))
        except Exception as exc:  # boundary: a check that breaks is itself a finding, not a crash
            results = [CheckResult(check.__name__.removeprefix("check_"), "FAIL",
                                   f"the check itself failed ({type(exc).__name__})")]
        for result in results:
            print(result.line, file=out, flush=True)
            healthy = healthy and result.status != "FAIL"
    return healthy
