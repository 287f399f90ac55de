"""Running kernel tools inside a named network namespace (`ip netns exec`), or on the host.

Every kernel edge of netkit (iptables, nft, ipset, conntrack, the lab) runs its tools through
`run()`, so `--netns NAME` is honoured everywhere by one piece of code.

For sockets: setns(2) with CLONE_NEWNET changes the namespace of the calling *thread* only, and a
socket keeps the namespace it was created in. `in_netns(ns, fn)` runs `fn` on a short-lived helper
thread that enters `ns` first, so `socket_in` gives a socket living in `ns` that any thread can use
(the daemon's health servers, the lab's clients) without moving the caller.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from netkit.errors import KernelError

T = TypeVar("T")


def wrap(cmd: Sequence[str], netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns, *cmd] if netns else list(cmd)


def run(cmd: Sequence[str], netns: str | None = None, *, input: str | None = None,
        check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    argv = wrap(cmd, netns)
    try:
        # its own process group: a Ctrl-C at the terminal reaches netkit, which stops at a safe
        # point, and never kills a kernel tool half-way
        # (and never reads the terminal: a background process group reading it would be stopped)
        stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
        proc = subprocess.run(argv, **stdin, capture_output=True, text=True, timeout=timeout,
                              process_group=0)
    except FileNotFoundError as exc:
        raise KernelError(f"{argv[0]}: not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise KernelError(f"{' '.join(argv[:6])}: timed out after {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        where = f" in network namespace {netns}" if netns else ""
        raise KernelError(f"{' '.join(cmd[:3])} failed{where} (exit {proc.returncode})",
                          payload=input or "", stderr=proc.stderr)
    return proc


def exists(netns: str) -> bool:
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return any(line.split()[0] == netns for line in proc.stdout.splitlines() if line.strip())


NETNS_RUN_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def enter(netns: str) -> None:
    """Move the calling thread into `netns` (for helper threads and forked children only)."""
    fd = os.open(os.path.join(NETNS_RUN_DIR, netns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {netns}: {os.strerror(err)}")
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


def netlink_socket(netns: str | None, proto: int, *, rcvbuf: int = 0) -> socket.socket:
    """A bound raw netlink socket of `proto` in `netns` (None: this process's namespace), with a
    receive buffer of `rcvbuf` bytes when given (large dumps)."""
    if netns is None:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto)
    else:
        sock = socket_in(netns, socket.AF_NETLINK, socket.SOCK_RAW, proto)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((0, 0))
    return sock
