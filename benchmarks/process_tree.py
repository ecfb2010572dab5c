"""CPU time and resident memory of a process and all its descendants, read from /proc (Linux), and a sampler that
records both over time while the process runs.

CPU: every live process of the tree counts its own user + system time and that of its children it has reaped
(cutime, cstime), so a finished child's time is counted once, in its parent; threads are in their process's time.
Memory: the sum of the live processes' resident set sizes (VmRSS). Pages shared between processes (a forked
worker's copy-on-write pages, shared libraries) count once per process, so the sum is an upper bound of what the
tree holds in memory, which is what a memory limit on a cluster job counts too.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def tree_pids(pid: int) -> list[int]:
    """The process and its live descendants."""
    found, stack, seen = [], [pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):  # the process ended meanwhile
            continue
        found.append(p)
    return found


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / _TICKS  # utime stime cutime cstime


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0  # a zombie has no VmRSS line


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by a process and its descendants, alive or reaped."""
    total = 0.0
    for p in tree_pids(pid):
        try:
            total += _cpu_seconds(p)
        except (OSError, ValueError):  # ended meanwhile: its time is in its parent's cutime
            continue
    return total


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of the process and its live descendants (the sum of their VmRSS)."""
    total = 0
    for p in tree_pids(pid):
        try:
            total += _rss_bytes(p)
        except (OSError, ValueError):
            continue
    return total


@dataclass(frozen=True)
class Sample:
    wall: float       # time.time() of the reading
    cpu: float        # tree CPU seconds so far
    rss: int          # tree resident bytes now


class TreeSampler:
    """Reads a process tree's CPU time and memory every `interval` seconds in a background thread, from start()
    until stop(); a peak shorter than the interval can be missed, so the peaks are lower bounds."""

    def __init__(self, pid: int, interval: float = 0.25):
        self.pid, self.interval = pid, interval
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _read(self) -> None:
        self.samples.append(Sample(time.time(), tree_cpu_seconds(self.pid), tree_rss_bytes(self.pid)))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._read()
            self._stop.wait(self.interval)

    def start(self) -> "TreeSampler":
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        """Stops sampling (call before reaping the process: a reaped tree reads as empty)."""
        self._stop.set()
        self._thread.join()
        return self.samples
