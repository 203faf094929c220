"""``make run``'s stop: every child stopped in order, none left running, even when a second signal
comes while it stops or a child ignores SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from oss_responses.devstack import stop_all

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"
OBEDIENT = "import time; print(flush=True); time.sleep(60)"


def _child(code: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, process_group=0)
    assert child.stdout is not None
    child.stdout.readline()  # its handlers are in place
    return child


def test_stop_all_kills_a_child_that_ignores_sigterm_after_its_grace() -> None:
    children = [_child(OBEDIENT), _child(STUBBORN)]
    started = time.monotonic()
    stop_all(children, grace_seconds=0.5)
    assert [child.returncode for child in children] == [-signal.SIGTERM, -signal.SIGKILL]
    assert time.monotonic() - started < 5


def test_stop_all_second_signal_while_stopping_kills_the_rest_at_once() -> None:
    children = [_child(OBEDIENT), _child(OBEDIENT), _child(STUBBORN)]  # stopped last to first
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    started = time.monotonic()
    stop_all(children, grace_seconds=30)
    assert time.monotonic() - started < 5
    assert all(child.returncode == -signal.SIGKILL for child in children)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the caller's handler is back
