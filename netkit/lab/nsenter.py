"""Entering a network namespace from Python without leaving the caller there.

`setns(2)` with CLONE_NEWNET changes the namespace of the calling *thread* only. So the lab never
moves the thread that calls it: `in_netns(ns, fn)` runs `fn` on a short-lived helper thread that
enters `ns` first and then ends. A socket's namespace is fixed when the socket is created, so a socket
made there (`socket_in`) keeps working from any thread: the test process connects, listens and
sniffs in any lab namespace without forking. `/proc/sys/net` shows the namespace of the thread that
opens it, which is how `write_sysctls` sets sysctls inside a namespace and never in the machine's own.

Code that caches namespace state at import time (Scapy) needs a whole process instead: see `fork.py`.
"""

from __future__ import annotations

from collections.abc import Mapping

from netkit.lab.errors import LabError
from netkit.netns import NETNS_RUN_DIR, enter, in_netns, socket_in

__all__ = ["NETNS_RUN_DIR", "enter", "in_netns", "read_sysctl", "socket_in", "write_sysctls"]


def write_sysctls(netns: str, values: Mapping[str, str]) -> None:
    """Write `values` ({"net/ipv4/ip_forward": "1"}) under /proc/sys inside `netns`."""

    def write() -> None:
        for key, value in values.items():
            with open(f"/proc/sys/{key}", "w") as fh:
                fh.write(value)

    try:
        in_netns(netns, write)
    except OSError as exc:
        raise LabError(f"sysctl in {netns}: {exc}") from exc


def read_sysctl(netns: str, key: str) -> str:
    def read() -> str:
        with open(f"/proc/sys/{key}") as fh:
            return fh.read().strip()

    return in_netns(netns, read)
