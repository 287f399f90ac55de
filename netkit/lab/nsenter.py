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

import ctypes
import os
import socket
import threading
from collections.abc import Callable, Mapping
from typing import TypeVar

from netkit.lab.errors import LabError

T = TypeVar("T")

NETNS_RUN_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def enter(netns: str) -> None:
    """Move the calling thread into `netns` (for helper threads and forked children only)."""
    fd = os.open(os.path.join(NETNS_RUN_DIR, netns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise LabError(f"setns into {netns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def in_netns(netns: str, fn: Callable[[], T]) -> T:
    """Run `fn` on a helper thread inside `netns`; return its result or raise its exception."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            enter(netns)
            outcome.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            failure.append(exc)

    helper = threading.Thread(target=body, name=f"netns:{netns}", daemon=True)
    helper.start()
    helper.join()
    if failure:
        raise failure[0]
    return outcome[0]


def socket_in(netns: str, family: int, kind: int, proto: int = 0) -> socket.socket:
    """A socket living in `netns`, usable from any thread."""
    return in_netns(netns, lambda: socket.socket(family, kind, proto))


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
