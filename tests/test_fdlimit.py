"""A serving process raises its soft open-files limit at start (``oss_responses/fdlimit.py``)."""

from __future__ import annotations

import resource
import subprocess
import sys

from support import REPO
from support.processes import soft_open_files

from oss_responses.fdlimit import WANTED

HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
TARGET = WANTED if HARD == resource.RLIM_INFINITY else min(WANTED, HARD)  # where the limit is raised to
REPORT = ("import resource; from oss_responses.fdlimit import raise_open_files_limit; "
          "print(raise_open_files_limit('test'), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")


def _started_with(soft: int) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", REPORT], cwd=REPO, check=True, capture_output=True, text=True,
                         preexec_fn=soft_open_files(soft)).stdout
    returned, now = map(int, out.split())
    return returned, now


def test_raise_open_files_limit_from_a_low_soft_limit() -> None:
    assert _started_with(256) == (TARGET, TARGET)


def test_raise_open_files_limit_leaves_a_limit_already_there() -> None:
    assert _started_with(TARGET) == (TARGET, TARGET)
