"""``make run``'s stop: every child stopped in order, none left running, even when a second signal
comes while it stops or a child ignores SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from oss_responses.config import Settings
from oss_responses.devstack import stack_env, stop_all

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


def test_stack_env_with_servers_and_keys_set_empty_starts_nothing_for_them(tmp_path: Path) -> None:
    # Set but empty is a choice (a stack without MCP servers, without sealing), not "unset".
    procs: list[subprocess.Popen[bytes]] = []
    env = stack_env(Settings(tool_servers={}, encryption_keys=[]), tmp_path, procs)
    assert procs == [] and not (tmp_path / "encryption-key").exists()
    assert env.get("OSS_RESPONSES_TOOL_SERVERS") == os.environ.get("OSS_RESPONSES_TOOL_SERVERS")


def test_stack_env_without_keys_gives_the_stack_one_kept_in_var(tmp_path: Path) -> None:
    first, again = (stack_env(Settings(tool_servers={}), tmp_path, []) for _ in range(2))
    keys = json.loads(first["OSS_RESPONSES_ENCRYPTION_KEYS"])
    assert len(keys) == 1 and json.loads(again["OSS_RESPONSES_ENCRYPTION_KEYS"]) == keys
