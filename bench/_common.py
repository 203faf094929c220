"""What every bench script computes alike: percentiles of samples, the CPU time and memory of processes.

The scripts run as ``python bench/NAME.py`` (their folder, so this module, is on ``sys.path``); they
import the checkout (``oss_responses``) and the test helpers (``support``, in tests/), which the
Makefile's ``bench`` target puts on ``PYTHONPATH``: by hand, ``PYTHONPATH=.:tests python bench/NAME.py``.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

_TICK = os.sysconf("SC_CLK_TCK")


def nearest_rank(count: int, q: float) -> int:
    """The index, in ``count`` sorted samples, of the ``q`` percentile (``0 < q <= 1``) by nearest rank."""
    if count < 1:
        raise ValueError("no samples")
    return min(count, max(1, math.ceil(q * count))) - 1


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q`` percentile (``0 < q <= 1``: 0.5 is p50, 0.99 is p99) by the nearest-rank method.

    The smallest sample with at least ``q`` of the samples at or below it: always one of the samples,
    never interpolated, so a p99 of 50 samples is their largest. Every bench reports p50 (its median
    included) and p99 with this function, so their figures compare.
    """
    return sorted(samples)[nearest_rank(len(samples), q)]


def cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User plus system CPU seconds of process ``pid`` (all its threads) so far; 0 once it has ended.

    ``reaped``: with its ended children's (those it has waited for), so a group that lists a process
    tree keeps the CPU of a child that ends during a window: it moves to its parent's count instead
    of vanishing (PostgreSQL's backends come and go)."""
    if pid == os.getpid() and not reaped:
        return time.process_time()
    return stat_cpu_seconds(f"/proc/{pid}/stat", reaped=reaped)


def stat_cpu_seconds(stat_path: str, *, reaped: bool = False) -> float:
    """utime + stime (+ cutime + cstime if ``reaped``) of a ``/proc/PID/stat`` or
    ``/proc/PID/task/TID/stat`` file; 0 if it is gone."""
    try:
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:  # it ended meanwhile
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICK


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of ``pid`` by kernel thread id (threads that ended meanwhile read 0: left out)."""
    try:
        tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return {}
    used = {tid: stat_cpu_seconds(f"/proc/{pid}/task/{tid}/stat") for tid in tids}
    return {tid: seconds for tid, seconds in used.items() if seconds > 0}


def descendants(pid: int) -> list[int]:
    """Every process started by ``pid``, recursively (vLLM's engine core, a worker's pool...)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                children = [int(child) for child in f.read().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *descendants(child)]
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process it started (read now: a group whose processes come and go)."""
    return [pid, *descendants(pid)]


@dataclass
class CpuMeter:
    """CPU seconds of named process groups over a window, and this process's own as ``"client"``.

    ``groups`` maps a name to its pids; it is called at every reading, so processes started meanwhile
    count, and a group's processes count their ended children too (``cpu_seconds(reaped=True)``): a
    listed process that ends within the window keeps its CPU in the group's figure through its parent,
    where leaving it out made a group's CPU negative. ``begin()`` opens a window, ``end()`` gives each
    group's CPU seconds in it (``"client"`` last) and ``wall`` the window's wall-clock seconds.
    """

    groups: Callable[[], dict[str, list[int]]]
    start: dict[str, float] = field(default_factory=dict)
    started_at: float = 0.0
    wall: float = 0.0

    def now(self) -> dict[str, float]:
        used = {name: sum(cpu_seconds(pid, reaped=True) for pid in pids) for name, pids in self.groups().items()}
        return used | {"client": cpu_seconds(os.getpid())}

    def begin(self) -> None:
        self.start, self.started_at = self.now(), time.monotonic()

    def end(self) -> dict[str, float]:
        now = self.now()
        self.wall = time.monotonic() - self.started_at
        return {name: value - self.start.get(name, 0.0) for name, value in now.items()}


class CpuTimeline:
    """CPU seconds of named processes, read every ``interval`` seconds by a thread of its own, for
    windows known only afterwards (a run's steady part): ``between(start, end)`` interpolates each
    process's count at two ``time.monotonic()`` moments. Readings have the kernel's 10 ms tick: use
    windows of seconds."""

    def __init__(self, pids: dict[str, int], interval: float = 0.02) -> None:
        self.pids = dict(pids)
        self._interval = interval
        self._readings: list[tuple[float, dict[str, float]]] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._read_forever, name="cpu-timeline", daemon=True)

    def __enter__(self) -> CpuTimeline:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join()

    def add(self, name: str, pid: int) -> None:
        self.pids = self.pids | {name: pid}  # replaced, not mutated: the reading thread iterates it

    def _read_forever(self) -> None:
        while not self._stopping.wait(self._interval):
            self._readings.append((time.monotonic(), {name: cpu_seconds(pid) for name, pid in self.pids.items()}))

    def between(self, start: float, end: float) -> dict[str, float]:
        """Each process's CPU seconds from ``start`` to ``end`` (those read at both ends)."""
        first, last = self._at(start), self._at(end)
        return {name: last[name] - first[name] for name in last if name in first}

    def _at(self, moment: float) -> dict[str, float]:
        after = next((i for i, (at, _) in enumerate(self._readings) if at >= moment), None)
        if after is None or after == 0:
            raise ValueError("no readings around that moment")
        (t0, c0), (t1, c1) = self._readings[after - 1], self._readings[after]
        share = (moment - t0) / (t1 - t0)
        return {name: c0[name] + share * (c1[name] - c0[name]) for name in c1 if name in c0}


def rss_kib(pid: int) -> int:
    """The resident memory of process ``pid``, in KiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")
