"""Sampling profiles of running processes with py-spy, summarised as their top functions.

``py-spy record --format raw`` writes collapsed stacks (``frame;frame;...;leaf count``); idle threads are
left out by py-spy, so the samples are where the process spent CPU. Per function: self (the leaf) and
total (anywhere on the stack, counted once per sample), as shares of all samples.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

# "function (path/to/file.py:123)" -> "function (file.py)": lines differ per sample, functions do not.
_FRAME = re.compile(r"^(?P<name>.*?) \((?P<path>[^:()]+)(?::\d+)?\)$")


class Profiler:
    """``start()`` py-spy on each named pid, ``stop()`` them; ``summary()`` per process."""

    def __init__(self, pids: dict[str, int], folder: Path, rate: int = 250) -> None:
        self.pids, self.folder, self.rate = pids, folder, rate
        self._processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        py_spy = str(Path(sys.executable).with_name("py-spy"))  # the venv's (requirements-dev)
        for name, pid in self.pids.items():
            command = [py_spy, "record", "--format", "raw", "--nonblocking", "--rate", str(self.rate),
                       "--output", str(self.folder / f"{name}.txt"), "--pid", str(pid)]
            self._processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def stop(self) -> None:
        for process in self._processes:
            process.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        for process in self._processes:
            process.wait(30)

    def summary(self, top: int = 12) -> list[str]:
        lines = []
        for name in self.pids:
            path = self.folder / f"{name}.txt"
            if path.exists():
                lines += summarise(name, path.read_text(), top)
        return lines


def short(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    return f"{match['name']} ({Path(match['path']).name})"


def summarise(name: str, collapsed: str, top: int) -> list[str]:
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [short(frame) for frame in stack.split(";")]
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            anywhere[frame] += count
    if not samples:
        return [f"profile {name}: no samples"]
    lines = [f"profile {name}: {samples} samples; top by self time (self %, total %):"]
    for frame, count in own.most_common(top):
        lines.append(f"  {count / samples:6.1%} {anywhere[frame] / samples:6.1%}  {frame}")
    return lines
