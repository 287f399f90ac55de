"""What /proc says of other processes, for the code that finds and stops them: the lab's teardown
(netkit.lab.cluster.lifecycle), the traffic scenarios' CPU accounting (netkit.testing.scenarios) and
the test suite's leftovers guard. A process can end between being listed and being read: every
reader then returns None rather than raising.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Stat:
    """The fields of /proc/PID/stat these callers use (proc(5); counted after the command's name)."""

    ppid: int
    cpu_ticks: int  # utime + stime, in clock ticks
    started: int  # start time after boot, in clock ticks: with the pid, names one process for good

    @property
    def cpu_seconds(self) -> float:
        return self.cpu_ticks / os.sysconf("SC_CLK_TCK")


def pids() -> Iterator[int]:
    """Every process's pid, this one's included."""
    return (int(e) for e in os.listdir("/proc") if e.isdigit())


def cmdline(pid: int) -> bytes | None:
    """The NUL-separated command line (empty for a zombie or a kernel thread)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def environ(pid: int) -> dict[bytes, bytes] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    return dict(e.split(b"=", 1) for e in raw.split(b"\0") if b"=" in e)


def stat(pid: int) -> Stat | None:
    try:
        # the command's name is in parentheses and may hold anything, spaces and ")" included
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return Stat(int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19]))
    except (OSError, IndexError, ValueError):
        return None
